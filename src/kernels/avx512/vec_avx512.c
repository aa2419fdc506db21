/* The vector-math leaves for this level (kernels/vec_math.inc). */
#define VEC(name) wna16_##name##__avx512
#define VEC_OPS wna16_vec_ops__avx512
#include "kernels/vec_math.inc"
