/* checkpoint.h: Megatron-style checkpoint directories holding safetensors files.
 *
 * Layout (one tensor-parallel, one pipeline rank):
 *   <save>/latest_checkpointed_iteration.txt   the iteration as decimal digits, no newline
 *   <save>/iter_%07d/mp_rank_00/model.safetensors   weights under Megatron's legacy names (F32)
 *   <save>/iter_%07d/mp_rank_00/optim.safetensors   AdamW state, "<param>.exp_avg" and
 *                                                   "<param>.exp_avg_sq", plus whatever else the
 *                                                   caller passes; absent when saved without it
 *   <save>/iter_%07d/mp_rank_00/meta.json           a JSON object built by the caller (args,
 *                                                   iteration, consumed samples, RNG, scaler, ...)
 * When loading, the tracker may also say "release" (directory <load>/release/, iteration 0), as in
 * Megatron.
 *
 * Saving is crash-safe: everything is written into <save>/iter_%07d.tmp-<tag>-<pid>/ (io/tmpname; each
 * file fsynced and renamed into place, the directories fsynced), which is then renamed to iter_%07d (an existing
 * directory of the same iteration is swapped out atomically with renameat2(RENAME_EXCHANGE) and then
 * removed), the save directory is fsynced, and only then is the tracker replaced atomically. A crash
 * at any point leaves the tracker naming a complete directory. Loading never looks at *.tmp-*
 * directories; a save removes those left by processes of this host that no longer run.
 *
 * Test hook: with MT_CKPT_CRASH_AFTER=<n> in the environment a save calls _exit(99) after its n-th
 * step. Steps: 1 model.safetensors, 2 optim.safetensors (when saved), next meta.json, then the rename
 * to iter_%07d, then the tracker; n = 0 stops after the temporary directory is created.
 *
 * Errors are one line naming the file, e.g.
 *   "ckpt/iter_0000200/mp_rank_00/model.safetensors: no such file (tracker says iteration 200)".
 */
#ifndef MT_CKPT_CHECKPOINT_H
#define MT_CKPT_CHECKPOINT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "io/safetensors.h"
#include "util/err.h"

#define MT_CKPT_MAXDIM 4
#define MT_CKPT_TRACKER "latest_checkpointed_iteration.txt"
/* Iteration values for mt_ckpt_open(): the tracker's choice, or the "release" directory. */
#define MT_CKPT_LATEST (-1)
#define MT_CKPT_RELEASE (-2)

/* A tensor to save: float32, C order. With data NULL, fill writes its prod(shape) floats into dst when
 * the file reaches it (one tensor in memory at a time; 0, or -1 with e set). */
typedef struct mt_ckpt_tensor {
    const char *name;
    int ndim;
    int64_t shape[MT_CKPT_MAXDIM];
    const float *data;
    int (*fill)(void *fill_ctx, const struct mt_ckpt_tensor *t, float *dst, mt_err *e);
    void *fill_ctx;
    /* or, with data NULL, elements first .. first + count - 1 (C order) into dst, in pieces of at most
     * MT_CKPT_CHUNK_BYTES: a file is then written through one buffer of that size */
    int (*fill_range)(void *fill_ctx, const struct mt_ckpt_tensor *t, size_t first, size_t count, float *dst,
                      mt_err *e);
} mt_ckpt_tensor;

/* The piece a file of tensors with fill_range is written in (the save's staging buffer). */
#define MT_CKPT_CHUNK_BYTES ((size_t)1 << 20)

enum { MT_CKPT_MODEL = 0, MT_CKPT_OPTIM = 1 };

/* Saves iteration (>= 0, or MT_CKPT_RELEASE: directory release/, tracker "release") under save_dir (created if missing). n_optim == 0 writes no optim file
 * (--no-save-optim). meta must be a JSON object; it is stored as meta.json unchanged (the caller
 * owns it). Tensor names must be unique per file. Returns 0 or -1. */
int mt_ckpt_save(const char *save_dir, int64_t iteration, const mt_ckpt_tensor *model, int n_model,
                 const mt_ckpt_tensor *optim, int n_optim, json_t *meta, mt_err *e);

/* One rank's directory of a checkpoint: name (mt_ckpt_rank_name), its tensors and its meta.json. */
typedef struct mt_ckpt_rank {
    const char *name;
    const mt_ckpt_tensor *model;
    int n_model;
    const mt_ckpt_tensor *optim;
    int n_optim;
    json_t *meta;
} mt_ckpt_rank;

/* As mt_ckpt_save, for a checkpoint of several ranks (tensor and pipeline parallel): every rank's
 * directory is written into the temporary directory before it is installed and the tracker updated. */
int mt_ckpt_save_ranks(const char *save_dir, int64_t iteration, const mt_ckpt_rank *ranks, int n_ranks, mt_err *e);
/* mt_ckpt_save_ranks with a hook: fill(tmp, arg, e) runs when every rank's files are written, with the
 * temporary ".../iter_%07d.tmp-<tag>-<pid>" directory, to add files to the rank directories in it (the
 * distributed optimizer's shards, written by every data-parallel rank); it returns 0, or -1 with e set to
 * abandon the save. Its files are part of the directory that is installed before the tracker changes. */
typedef int (*mt_ckpt_fill)(const char *tmp, void *arg, mt_err *e);
int mt_ckpt_save_ranks_ex(const char *save_dir, int64_t iteration, const mt_ckpt_rank *ranks, int n_ranks,
                          mt_ckpt_fill fill, void *arg, mt_err *e);

/* A save written by the ranks of a job in parallel (train/train_ckpt.c), each its own files:
 *   mt_ckpt_part_arm           every rank, at the start of a save: the MT_CKPT_CRASH_AFTER hook's count
 *                              starts again (mt_ckpt_part_step counts a step of the caller's own)
 *   mt_ckpt_part_begin         one rank: creates the temporary "<save>/iter_%07d.tmp-<tag>-<pid>" (removing
 *                              stale ones); returns it (the caller frees it), NULL with e set
 *   mt_ckpt_part_dir           any rank: tmp/<rank_name>, created unless it exists; *out the path (freed by
 *                              the caller)
 *   mt_ckpt_part_write_rank    a rank directory's model, optim and meta.json files (as mt_ckpt_save_ranks),
 *                              its directory fsynced; other processes may add files to it
 *   mt_ckpt_part_sync_dir      fsync of a directory a process added files to
 *   mt_ckpt_part_commit        one rank, once every rank has written and synced (the caller's agreement):
 *                              installs tmp as iter_%07d and then writes the tracker; on error tmp is removed
 *   mt_ckpt_part_abandon       removes tmp (a save the ranks did not all complete)
 * A crash at any point leaves the tracker naming the previous complete directory. */
void mt_ckpt_part_arm(void);
void mt_ckpt_part_step(void);
char *mt_ckpt_part_begin(const char *save_dir, int64_t iteration, mt_err *e);
int mt_ckpt_part_dir(const char *tmp, const char *rank_name, char **out, mt_err *e);
int mt_ckpt_part_write_rank(const char *tmp, const mt_ckpt_rank *k, mt_err *e);
int mt_ckpt_part_sync_dir(const char *dir, mt_err *e);
int mt_ckpt_part_commit(const char *save_dir, int64_t iteration, const char *tmp, mt_err *e);
void mt_ckpt_part_abandon(const char *tmp);

/* Megatron's rank directory name: "mp_rank_TT" with one pipeline stage, "mp_rank_TT_PPP" with more. */
void mt_ckpt_rank_name(char *buf, size_t cap, int tp_rank, int pp_rank, int pp_size);
/* With expert parallelism (ep_size > 1) Megatron appends the expert rank: "mp_rank_TT[_PPP]_EEE". */
void mt_ckpt_rank_name_ep(char *buf, size_t cap, int tp_rank, int pp_rank, int pp_size, int ep_rank, int ep_size);

/* With an expert tensor size etp below tp only the (tensor rank, expert rank) pairs some rank held are saved.
 * present[(p ep + x) tp + t]: whether the rank directory of stage p, expert rank x, tensor rank t is there.
 * Every stage needs one of each tensor rank (its dense slices) and, for each expert rank, one of each expert
 * tensor slice (tensor rank % etp). 0 when covered; else 1 with the first gap's stage, tensor rank (-1: the
 * gap is an expert rank's) and expert rank (-1: a tensor rank's), its slice then in *t. */
int mt_ckpt_held_gap(const unsigned char *present, int tp, int pp, int ep, int etp, int *p, int *t, int *x);

/* Checks at start-up that save_dir is usable: creates it (and its parents) if missing, then that it is a
 * directory in which this process can create entries. Returns 0 or -1 naming the directory. */
int mt_ckpt_check_save_dir(const char *save_dir, mt_err *e);
/* One writer per checkpoint directory: an exclusive lock (flock) on <save_dir>/.mt-train.lock, held by the
 * returned descriptor until it is closed or the process ends (a job that dies leaves no lock behind).
 * The file holds the holder's host and pid. -1 with e set, naming the holder, when a live job holds it. */
int mt_ckpt_lock_save_dir(const char *save_dir, mt_err *e);
/* A conversion's --save (mt-ckpt-convert): usable as mt_ckpt_check_save_dir says, and holding no
 * checkpoint yet (no tracker), since writing into one would replace its latest iteration. 0, or -1 with
 * e set before anything was written. */
int mt_ckpt_check_new_save_dir(const char *save_dir, mt_err *e);

/* Reads <load_dir>/latest_checkpointed_iteration.txt: 0 with *iteration set (MT_CKPT_RELEASE for
 * "release"), 1 when there is no tracker (no checkpoint; *iteration unchanged), -1 on error
 * (unreadable, or not a non-negative decimal number or "release"). */
int mt_ckpt_latest(const char *load_dir, int64_t *iteration, mt_err *e);

typedef struct mt_ckpt_reader mt_ckpt_reader;

/* Opens one checkpoint: iteration >= 0, MT_CKPT_LATEST (from the tracker; an error when there is
 * none) or MT_CKPT_RELEASE. Maps and validates model.safetensors, optim.safetensors when present,
 * and reads meta.json (a JSON object; if it has an integer "iteration" it must agree). NULL on
 * error. */
mt_ckpt_reader *mt_ckpt_open(const char *load_dir, int64_t iteration, mt_err *e);
/* The same for the rank directory rank_name ("mp_rank_01_002"); NULL: the first rank (mp_rank_00, or
 * mp_rank_00_000 when the checkpoint has pipeline stages). */
mt_ckpt_reader *mt_ckpt_open_rank(const char *load_dir, int64_t iteration, const char *rank_name, mt_err *e);
void mt_ckpt_close(mt_ckpt_reader *r);

/* The iteration loaded (0 for a release checkpoint), whether it was "release", its
 * "<load>/iter_%07d/mp_rank_00" directory, and whether it has optimizer state. */
int64_t mt_ckpt_iteration(const mt_ckpt_reader *r);
bool mt_ckpt_is_release(const mt_ckpt_reader *r);
const char *mt_ckpt_dir(const mt_ckpt_reader *r);
bool mt_ckpt_has_optim(const mt_ckpt_reader *r);

/* meta.json, borrowed: valid until mt_ckpt_close (json_incref to keep it). */
json_t *mt_ckpt_meta(const mt_ckpt_reader *r);

/* The opened safetensors file (which: MT_CKPT_MODEL or MT_CKPT_OPTIM), NULL when absent; for
 * listing names and metadata. */
const mt_st_file *mt_ckpt_file(const mt_ckpt_reader *r, int which);

/* Copies tensor name of file which into dst (prod(shape) floats) after checking that it exists and
 * has exactly this shape. F32 is copied; F16 and BF16 are widened; other dtypes are an error.
 * Errors: "<file>: missing tensor '<name>'", "<file>: tensor '<name>' has shape [3072, 768], this
 * model needs [2048, 512]", "<dir>: no optimizer state (optim.safetensors absent; saved with
 * --no-save-optim?)". Returns 0 or -1. */
int mt_ckpt_read_tensor(mt_ckpt_reader *r, int which, const char *name, int ndim, const int64_t *shape, float *dst,
                        mt_err *e);

/* After loading: -1 with "<file>: unexpected tensor 'x' (and N more)" if file which holds tensors
 * that mt_ckpt_read_tensor never read (a checkpoint of another model), else 0. */
int mt_ckpt_check_all_read(const mt_ckpt_reader *r, int which, mt_err *e);

#endif
