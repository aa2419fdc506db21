#include "kernels/attn.h"
#include "kernels/gemm.h"

wna16_attn_fn wna16_attn_group(int64_t hd) {
    if (wna16_isa_active() >= WNA16_ISA_AVX512BF16 && hd % 32 == 0 && hd <= 256)
        return wna16_attn_group__avx512bf16;
    if (wna16_isa_active() >= WNA16_ISA_AVX512 && hd % 16 == 0 && hd <= 256)
        return wna16_attn_group__avx512;
    return wna16_attn_group__ref;
}
