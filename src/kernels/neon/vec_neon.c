/* The vector-math leaves for this level (kernels/vec_math.inc). */
#define VEC(name) wna16_##name##__neon
#define VEC_OPS wna16_vec_ops__neon
#include "kernels/vec_math.inc"
