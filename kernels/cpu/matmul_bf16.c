/* matmul_bf16.c: the linear layer with bf16 operands on cpu, through oneDNN (dnnl.c): products in bf16
 * with fp32 accumulation; the forward bias is added in fp32 before the output is rounded to bf16, the
 * weight gradient is stored in or accumulated into the fp32 gradient buffer, the bias gradient is summed
 * in fp32 from the bf16 output gradient. No staging copies: oneDNN reads the bf16 buffers where they are. */
#include <stdint.h>
#include <string.h>

#include "cpu.h"

enum { DW_ROWS = 2048, DW_SPLIT = 8192 };

void cpu_matmul_fwd_bf16(mtk *k, void *out, const void *inp, const void *w, const float *bias, int N, int C, int OC)
{
    cpu_state *s = k->impl;
    /* out[N,OC] = inp[N,C] . W^T, W^T[c,o] = w[o*C + c] */
    cpu_dnnl_matmul(k, s->dnnl, MTK_BF16, N, OC, C, inp, C, 1, w, 1, C, bias, 0, out, MTK_BF16, OC);
}

void cpu_matmul_bwd_bf16(mtk *k, void *dinp, float *dw, float *dbias, const void *dout, const void *inp,
                         const void *w, int N, int C, int OC, int acc)
{
    cpu_state *s = k->impl;
    /* dinp[N,C] = dout[N,OC] . w[OC,C] */
    if (dinp && cpu_dnnl_matmul(k, s->dnnl, MTK_BF16, N, C, OC, dout, OC, 1, w, C, 1, NULL, 0, dinp, MTK_BF16, C)) return;
    /* dw[OC,C] (+)= dout^T . inp: dout^T[o,n] = dout[n*OC + o]; more than DW_SPLIT rows in slabs of DW_ROWS
     * (the LM head's 50304 rows in one product run at about 60% of the rate of such slabs) */
    int slab = OC > DW_SPLIT ? DW_ROWS : OC;
    for (int o = 0; dw && o < OC; o += slab) {
        int m = OC - o < slab ? OC - o : slab;
        if (cpu_dnnl_matmul(k, s->dnnl, MTK_BF16, m, C, N, (const uint16_t *)dout + o, 1, OC, inp, C, 1, NULL, acc,
                            dw + (size_t)o * C, MTK_F32, C))
            return;
    }
    if (dbias) cpu_bias_grad(dbias, dout, MTK_BF16, N, OC, acc);
}
