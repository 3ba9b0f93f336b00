/* fuzz_flags.c: command lines (words separated by NUL bytes) through the largest flag table, mt-train's,
 * with every check it makes of the values, then the values that are themselves small languages: the
 * --split string (Megatron's normalization and ranges, both rules) and the --data-path words (weighted
 * blends). --help and --version print and exit, so words starting with them are left out. */
#include "fuzz.h"

#include "config/train_args.h"
#include "data/gpt_dataset.h"
#include "data/split.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    memcpy(s, data, size);
    s[size] = 0;
    char *argv[34] = {"mt-train"};
    int argc = 1;
    for (char *w = s; w < s + size && argc < 33; w += strlen(w) + 1)
        if (strncmp(w, "--help", 6) && strncmp(w, "-h", 2) && strncmp(w, "--version", 9)) argv[argc++] = w;
    argv[argc] = NULL;
    mt_train_args a;
    memset(&a, 0, sizeof a);
    mt_err e;
    int fd = dup(2), null = open("/dev/null", O_WRONLY);
    dup2(null, 2); /* warnings of accepted flags */
    int rc = mt_train_args_parse(&a, argc, argv, &e);
    dup2(fd, 2);
    close(fd);
    close(null);
    if (rc) fz_refused(&e);
    if (rc == 0) {
        mt_range r[MT_NSPLITS];
        if (a.split) {
            mt_split_ranges(a.split, 1000003, r, &e);
            mt_split_ranges_legacy(a.split, 1000003, r, &e);
        }
        char **prefixes;
        double *weights;
        int n;
        if (a.data_path.n && !mt_data_path_parse(a.data_path.n, (char *const *)a.data_path.v, &prefixes, &weights, &n, &e)) {
            free(prefixes); /* the words are argv's */
            free(weights);
        }
    }
    if (rc == 0) mt_train_args_free(&a);
    /* the split string alone, whatever the rest of the line */
    mt_range r[MT_NSPLITS];
    if (argc > 1) mt_split_ranges(argv[1], 97, r, &e);
    free(s);
    return 0;
}
