/* agree.c: every rank's arguments against rank 0's at start-up (agree.h). */
#include "comm/agree.h"

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/fnv.h"

/* the entry at *off of d (n bytes): its flag and value, *off moved past it; 0 at the end */
static int next_entry(const char *d, size_t n, size_t *off, const char **flag, const char **value)
{
    if (*off >= n) return 0;
    *flag = d + *off;
    size_t a = strnlen(*flag, n - *off);
    *value = a + 1 < n - *off ? *flag + a + 1 : "";
    size_t b = a + 1 < n - *off ? strnlen(*value, n - *off - a - 1) : 0;
    *off += a + 1 + b + 1;
    return 1;
}

int mt_agree_first_difference(const char *a, size_t na, const char *b, size_t nb, char *out, size_t cap)
{
    size_t oa = 0, ob = 0;
    for (;;) {
        const char *fa, *va, *fb, *vb;
        int ha = next_entry(a, na, &oa, &fa, &va), hb = next_entry(b, nb, &ob, &fb, &vb);
        if (!ha && !hb) return -1;
        if (!ha) fa = fb, va = "not given";
        if (!hb) vb = "not given";
        if (ha && hb && !strcmp(fa, fb) && !strcmp(va, vb)) continue;
        if (strlen(va) <= MT_AGREE_SHOW_MAX && strlen(vb) <= MT_AGREE_SHOW_MAX)
            snprintf(out, cap, "%s differs from rank 0's: %s here, %s on rank 0", fa, va, vb);
        else snprintf(out, cap, "%s differs from rank 0's", fa);
        return 0;
    }
}

int mt_boot_agree(mt_boot *b, const char *ranked, const char *desc, size_t n, mt_err *e)
{
    if (b->size == 1 || !b->mpi) return 0;
    uint64_t mine = mt_fnv1a(MT_FNV1A_INIT, desc, n);
    uint64_t *all = mt_xcalloc((size_t)b->size, sizeof *all);
    if (MPI_Allgather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD) != MPI_SUCCESS) {
        free(all);
        return mt_err_set(e, "MPI_Allgather of the arguments' hashes failed");
    }
    int first = -1;
    for (int i = 1; i < b->size && first < 0; i++)
        if (all[i] != all[0]) first = i;
    free(all);
    if (first < 0) return 0;
    /* rank 0's description to every rank; the lowest rank that differs says where */
    uint64_t n0 = n;
    if (MPI_Bcast(&n0, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
        return mt_err_set(e, "MPI_Bcast of rank 0's arguments failed");
    if (n0 > (uint64_t)INT32_MAX) return mt_err_set(e, "rank 0's arguments: %llu bytes", (unsigned long long)n0);
    char *d0 = mt_xmalloc(n0 ? (size_t)n0 : 1);
    if (b->rank == 0) memcpy(d0, desc, n);
    if (MPI_Bcast(d0, (int)n0, MPI_CHAR, 0, MPI_COMM_WORLD) != MPI_SUCCESS) {
        free(d0);
        return mt_err_set(e, "MPI_Bcast of rank 0's arguments failed");
    }
    char line[2 * MT_AGREE_SHOW_MAX + 512];
    if (b->rank == first) {
        if (mt_agree_first_difference(desc, n, d0, (size_t)n0, line, sizeof line))
            snprintf(line, sizeof line, "the arguments differ from rank 0's");   /* not reached */
        fprintf(stderr, "%s: %s\n", ranked, line);
        fflush(stderr);
    }
    free(d0);
    mt_boot_exit(b, 1);
}
