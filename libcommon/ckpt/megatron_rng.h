/* megatron_rng.h: the RNG state a Megatron-LM rank's model_optim_rng.pt holds (rng_state), as Megatron's
 * _set_random_seed leaves it for the run's --seed: Python's random.seed, numpy's legacy np.random.seed and
 * torch.manual_seed (the CPU generator) with the rank's seed (--seed + 100 x its pipeline stage), and the CUDA
 * generators' Philox states (seed, offset 0): the default one, and the tracker's data-parallel-rng,
 * model-parallel-rng (+ 2718 + the tensor rank) and expert-parallel-rng (+ 1024 + 100 x the expert rank + the
 * expert tensor rank). mt's own dropout derives from the seed and the iteration, so these are what a Megatron
 * run given --no-load-rng would start from: written so that Megatron loads the checkpoint without that flag.
 */
#ifndef MT_CKPT_MEGATRON_RNG_H
#define MT_CKPT_MEGATRON_RNG_H

#include <stdint.h>

#define MT_MT19937_N 624
#define MT_TORCH_CPU_RNG_BYTES 5056   /* sizeof(CPUGeneratorImplState) on x86-64 and aarch64 */

typedef struct mt_meg_rng {
    uint32_t py[MT_MT19937_N];        /* random.getstate()[1], whose last element is the index 624 */
    uint32_t np[MT_MT19937_N];        /* np.random.get_state()[1]; position 624, no cached Gaussian */
    unsigned char torch_cpu[MT_TORCH_CPU_RNG_BYTES];   /* torch.get_rng_state() */
    unsigned char cuda[16];           /* torch.cuda.get_rng_state(): the default generator's (seed, offset) */
    unsigned char data_parallel[16], model_parallel[16], expert_parallel[16];   /* the tracker's */
} mt_meg_rng;

/* The state of the rank at tensor rank tp_rank and pipeline stage pp_stage of a run seeded with seed (> 0;
 * expert parallelism off, the expert tensor rank the tensor rank). */
void mt_meg_rng_seeded(int64_t seed, int tp_rank, int pp_stage, mt_meg_rng *out);
/* The same for a rank of expert rank ep_rank and expert tensor rank etp_rank (tensor rank % expert tensor size). */
void mt_meg_rng_seeded_ep(int64_t seed, int tp_rank, int pp_stage, int ep_rank, int etp_rank, mt_meg_rng *out);

#endif
