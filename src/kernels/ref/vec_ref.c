/* The vector-math leaves for this level (kernels/vec_math.inc). */
#define VEC(name) wna16_##name##__ref
#define VEC_OPS wna16_vec_ops__ref
#include "kernels/vec_math.inc"
