// moe_grouped.cu: the experts' products over rows grouped by expert (kernels.h's mtk_grouped_matmul_fwd/bwd)
// as gemm.cu's grouped products: the forward and the input gradient one grouped call each (the activation
// dtype out), the weight gradients (fp32 out: one call with fp32 activations; cuBLAS's grouped product has
// no 16-bit to fp32 form, so with bf16/fp16 a cuBLASLt product per group); an empty group has no product,
// and its weight gradient, when assigned, is zeroed. counts are host memory.
#include "cuda.h"

namespace MTK_CU_NS {

// Host room for the products of G groups (NULL with the error set when out of host memory).
static GemmGroup *groups(mtk *k, int G)
{
    return (GemmGroup *)host_scratch(k, 0, (size_t)(G > 0 ? G : 1) * sizeof(GemmGroup));
}

void grouped_matmul_fwd(mtk *k, void *out, const void *inp, const void *w, const int32_t *counts, int G, int C, int OC)
{
    const size_t a = mtk_dtype_size(k->act);
    GemmGroup *g = groups(k, G);
    if (!g) return;
    int n = 0;
    size_t r0 = 0;
    for (int e = 0; e < G; r0 += (size_t)counts[e++])   // out_e [rows, OC] = inp_e [rows, C] w_e [OC, C]^T
        if (counts[e] > 0)
            g[n++] = {(const char *)inp + r0 * C * a, (const char *)w + (size_t)e * OC * C * a, (char *)out + r0 * OC * a,
                      counts[e], OC, C};
    gemm_grouped(k, false, true, g, n, C, C, OC, k->act, 0.0f);
    check(k, "grouped_matmul_fwd");
}

void grouped_matmul_bwd(mtk *k, void *dinp, float *dw, const void *dout, const void *inp, const void *w,
                        const int32_t *counts, int G, int C, int OC, int acc)
{
    const size_t a = mtk_dtype_size(k->act);
    GemmGroup *g = groups(k, G);
    if (!g) return;
    int n = 0;
    size_t r0 = 0;
    if (dinp) {   // dinp_e [rows, C] = dout_e [rows, OC] w_e [OC, C]
        for (int e = 0; e < G; r0 += (size_t)counts[e++])
            if (counts[e] > 0)
                g[n++] = {(const char *)dout + r0 * OC * a, (const char *)w + (size_t)e * OC * C * a,
                          (char *)dinp + r0 * C * a, counts[e], C, OC};
        gemm_grouped(k, false, false, g, n, OC, C, C, k->act, 0.0f);
    }
    if (dw) {   // dw_e [OC, C] = dout_e^T inp_e (dout_e stored [rows, OC])
        n = 0, r0 = 0;
        for (int e = 0; e < G; r0 += (size_t)counts[e++]) {
            float *dwe = dw + (size_t)e * OC * C;
            if (counts[e] > 0)
                g[n++] = {(const char *)dout + r0 * OC * a, (const char *)inp + r0 * C * a, dwe, OC, C, counts[e]};
            else if (!acc && OC > 0 && C > 0)
                cudaMemsetAsync(dwe, 0, (size_t)OC * C * sizeof(float), stream(k));
        }
        gemm_grouped(k, true, false, g, n, OC, C, C, MTK_F32, acc ? 1.0f : 0.0f);
    }
    check(k, "grouped_matmul_bwd");
}

}  // namespace MTK_CU_NS
