// mma.h: one warp-level tensor-core product, D = A B + C with A 16x16 and B 16x8 in bf16 or fp16 and C, D
// in fp32 (PTX mma.sync.m16n8k16), with the operand layout the PTX ISA documents: lane = 4 g + t holds
//   A: a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t, 2t+1], a[2] = A[g][2t+8, 2t+9], a[3] = A[g+8][2t+8, 2t+9]
//   B: b[0] = B[2t, 2t+1][g], b[1] = B[2t+8, 2t+9][g]
//   C: c[0], c[1] = C[g][2t, 2t+1], c[2], c[3] = C[g+8][2t, 2t+1]
// (each 32-bit word two elements, the lower index in the low half). Because C's layout is A's for the
// next product, a softmax computed in registers feeds P V without a trip through shared memory. Under
// the simulator the warp exchanges its operands (simt::warp_allgather) and each lane computes its four
// outputs in fp32, in k order.
#pragma once
#include "cuda.h"
#include <string.h>

namespace MTK_CU_NS {

template <class T> __device__ __forceinline__ uint32_t pack2(float lo, float hi)
{
    const T l = stf<T>(lo), h = stf<T>(hi);
    uint16_t ul, uh;
    memcpy(&ul, &l, 2);
    memcpy(&uh, &h, 2);
    return (uint32_t)ul | (uint32_t)uh << 16;
}
template <class T> __device__ __forceinline__ float half_of(uint32_t w, int hi)
{
    const uint16_t u = (uint16_t)(hi ? w >> 16 : w);
    T v;
    memcpy((void *)&v, &u, 2);
    return ldf(v);
}
// Two consecutive elements of shared memory as one word (p 4-byte aligned).
template <class T> __device__ __forceinline__ uint32_t ld2(const T *p) { return *(const uint32_t *)p; }

template <class T> __device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], const uint32_t b[2])
{
#if defined(__CUDA_ARCH__)
    if constexpr (sizeof(T) == 2 && std::is_same<T, bf16>::value)
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#elif defined(SIMT_SIM)
    const uint32_t mine[6] = {a[0], a[1], a[2], a[3], b[0], b[1]};
    uint32_t all[32][6];
    simt::warp_allgather<6>(mine, all);
    const int lane = (int)(threadIdx.x & 31), g = lane >> 2, t = lane & 3;
    for (int o = 0; o < 4; o++) {
        const int row = g + (o >> 1) * 8, col = 2 * t + (o & 1);
        float s = c[o];
        for (int k = 0; k < 16; k++) {
            // A[row][k]: lane 4 (row % 8) + (k % 8) / 2, word (row >= 8) + 2 (k >= 8); B[k][col]: lane
            // 4 col + (k % 8) / 2, word 4 + (k >= 8); the half: k % 2
            const float av = half_of<T>(all[4 * (row & 7) + (k & 7) / 2][(row >> 3) + 2 * (k >> 3)], k & 1);
            const float bv = half_of<T>(all[4 * col + (k & 7) / 2][4 + (k >> 3)], k & 1);
            s += av * bv;
        }
        c[o] = s;
    }
#else
    (void)c, (void)a, (void)b;
#endif
}

}  // namespace MTK_CU_NS
