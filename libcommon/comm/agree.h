/* agree.h: the ranks of a job check that they were started alike before their first collective whose
 * shape depends on their arguments (the split into tensor, pipeline and data groups, the first broadcast
 * of weights): a rank given another --num-layers, --micro-batch-size, --sequence-parallel or --lr than the
 * others would otherwise hang, crash, die in MPI or train a drifting replica. */
#ifndef MT_COMM_AGREE_H
#define MT_COMM_AGREE_H

#include <stddef.h>

#include "comm/bootstrap.h"

/* Longest value that the disagreement line shows (both values shown only when each is at most this). */
#define MT_AGREE_SHOW_MAX 96

/* desc (n bytes) is this rank's description: entries of two NUL-terminated strings, a flag as the user
 * writes it and its value (config/train_args_desc.h). Every rank of the job calls this with its own; the
 * FNV-1a hashes of the descriptions are all-gathered and compared with rank 0's. When they agree (or the
 * job has one rank) it returns 0. Otherwise rank 0's description is broadcast, the lowest rank whose
 * description differs prints the one line
 *     <ranked>: <flag> differs from rank 0's: <its value> here, <rank 0's> on rank 0
 * naming the first entry that differs (the values left out when longer than MT_AGREE_SHOW_MAX), and every
 * rank exits 1 (mt_boot_exit), so that the launcher sees ranks that ended normally with status 1. -1 with
 * e set when MPI fails. */
int mt_boot_agree(mt_boot *b, const char *ranked, const char *desc, size_t n, mt_err *e);

/* The first entry (its flag, and each side's value, "not given" for an entry one side lacks) at which
 * the descriptions a and b differ, as the line above words it after "<ranked>: ", into out. 0, or -1 when
 * they are equal. */
int mt_agree_first_difference(const char *a, size_t na, const char *b, size_t nb, char *out, size_t cap);

#endif
