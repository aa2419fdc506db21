/* The vector-math leaves for this level (kernels/vec_math.inc). */
#define VEC(name) wna16_##name##__avx512
#include "kernels/vec_math.inc"

const wna16_vec_ops wna16_vec_ops__avx512 = {
    .moe_dot_f32 = VEC(moe_dot_f32),
    .moe_dot_rows = VEC(moe_dot_rows),
    .moe_dot_rows_bf16 = VEC(moe_dot_rows_bf16),
    .moe_dot_rows2 = VEC(moe_dot_rows2),
    .moe_silu_mul_bf16 = VEC(moe_silu_mul_bf16),
    .moe_axpy = VEC(moe_axpy),
    .axpy_neg = VEC(axpy_neg),
    .axpy_neg_d = VEC(axpy_neg_d),
};
