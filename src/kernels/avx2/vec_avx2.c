/* The vector-math leaves for this level (kernels/vec_math.inc). */
#define VEC(name) wna16_##name##__avx2
#define VEC_OPS wna16_vec_ops__avx2
#include "kernels/vec_math.inc"
