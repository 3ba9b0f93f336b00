/* megatron_rng.c: the generators' states after Megatron-LM seeds a rank (megatron_rng.h): the Mersenne
 * Twister's two seedings (by one 32-bit word, as numpy's legacy seeding and torch's CPU generator do, and by
 * an array of words, as Python's random.seed does for an int) and the byte layouts torch saves. */
#include "ckpt/megatron_rng.h"

#include <string.h>

#define N MT_MT19937_N

/* The reference MT19937 init_genrand. */
static void init_genrand(uint32_t *mt, uint32_t s)
{
    mt[0] = s;
    for (uint32_t i = 1; i < N; i++) mt[i] = 1812433253u * (mt[i - 1] ^ (mt[i - 1] >> 30)) + i;
}

/* The reference MT19937 init_by_array. */
static void init_by_array(uint32_t *mt, const uint32_t *key, int len)
{
    init_genrand(mt, 19650218u);
    int i = 1, j = 0;
    for (int k = N > len ? N : len; k; k--) {
        mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1664525u)) + key[j] + (uint32_t)j;
        i++, j++;
        if (i >= N) mt[0] = mt[N - 1], i = 1;
        if (j >= len) j = 0;
    }
    for (int k = N - 1; k; k--) {
        mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1566083941u)) - (uint32_t)i;
        i++;
        if (i >= N) mt[0] = mt[N - 1], i = 1;
    }
    mt[0] = 0x80000000u;
}

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* torch.manual_seed's CPU generator as get_rng_state() lays it out (CPUGeneratorImplState, little-endian):
 * the initial seed (u64), left 1 (i32), seeded 1 (i32), next 0 (u64), the 624 words each as a u64, the
 * unused normal_x, normal_y, normal_rho (f64) and normal_is_valid (i32), then the float normal sample and
 * its flag: zeros. */
static void torch_cpu_state(uint64_t seed, unsigned char *out)
{
    uint32_t mt[N];
    init_genrand(mt, (uint32_t)seed);
    memset(out, 0, MT_TORCH_CPU_RNG_BYTES);
    put64(out, seed);
    put32(out + 8, 1);
    put32(out + 12, 1);
    for (int i = 0; i < N; i++) put64(out + 24 + 8 * i, mt[i]);
}

/* A CUDA generator's get_rng_state() after manual_seed: its seed and Philox offset 0. */
static void cuda_state(uint64_t seed, unsigned char *out)
{
    put64(out, seed);
    put64(out + 8, 0);
}

void mt_meg_rng_seeded(int64_t seed0, int tp_rank, int pp_stage, mt_meg_rng *out)
{
    mt_meg_rng_seeded_ep(seed0, tp_rank, pp_stage, 0, tp_rank, out);
}

void mt_meg_rng_seeded_ep(int64_t seed0, int tp_rank, int pp_stage, int ep_rank, int etp_rank, mt_meg_rng *out)
{
    uint64_t seed = (uint64_t)(seed0 + 100 * (int64_t)pp_stage);
    /* Python: random.seed(int) keys init_by_array with the int's 32-bit words, least significant first */
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    init_by_array(out->py, key, seed >> 32 ? 2 : 1);
    /* numpy: RandomState's legacy seeding of an int below 2^32 */
    init_genrand(out->np, (uint32_t)seed);
    torch_cpu_state(seed, out->torch_cpu);
    cuda_state(seed, out->cuda);
    cuda_state(seed, out->data_parallel);
    cuda_state(seed + 2718 + (uint64_t)tp_rank, out->model_parallel);
    cuda_state(seed + 1024 + 100 * (uint64_t)ep_rank + (uint64_t)etp_rank, out->expert_parallel);
}
