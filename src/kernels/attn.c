#include "kernels/attn.h"
#include "kernels/ukernel.h"

/* The best leaf of the active level that takes hd: each level's table names
 * its own leaf and the head sizes it takes; a size it does not take goes to
 * the level below in the level's family (the reference takes every even hd). */
wna16_attn_fn wna16_attn_group(int64_t hd) {
    for (wna16_isa isa = wna16_isa_active(); isa != WNA16_ISA_REF; isa = wna16_isa_lower(isa)) {
        const wna16_kernel_table *t = wna16_kernels_at(isa);
        if (hd % t->attn_hd_mult == 0 && hd <= t->attn_hd_max) return t->attn_group;
    }
    return wna16_kernels_at(WNA16_ISA_REF)->attn_group;
}
