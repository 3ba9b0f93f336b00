/* flags.c: table-driven long-option parser and --help generator (see flags.h). */
#include "util/flags.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int mt_parse_i64(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    if (!*s) return -1;
    long long v = strtoll(s, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

int mt_parse_double(const char *s, double *out)
{
    char *end;
    errno = 0;
    if (!*s) return -1;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

static const mt_flag *find_flag(const mt_flag *f, const char *name, size_t len)
{
    for (; f->name; f++)
        if (strlen(f->name) == len && !strncmp(f->name, name, len)) return f;
    return NULL;
}

static bool is_flag(const char *a) { return a[0] == '-' && a[1] == '-' && a[2]; }

static bool choice_ok(const char *choices, const char *v)
{
    size_t n = strlen(v);
    for (const char *c = choices; *c;) {
        const char *bar = strchr(c, '|');
        size_t len = bar ? (size_t)(bar - c) : strlen(c);
        if (len == n && !strncmp(c, v, n)) return true;
        if (!bar) break;
        c = bar + 1;
    }
    return false;
}

static int set_value(const mt_flag *f, const char *v, mt_err *e)
{
    int64_t i;
    double d;
    bool ranged = f->min < f->max;
    switch (f->type) {
    case MT_F_INT:
    case MT_F_I64:
        if (mt_parse_i64(v, &i)) return mt_err_set(e, "%s: '%s' is not an integer", f->name, v);
        if (ranged && ((double)i < f->min || (double)i > f->max))
            return mt_err_set(e, "%s: %s is out of range [%.17g, %.17g]", f->name, v, f->min, f->max);
        if (f->type == MT_F_INT) {
            if (i < INT32_MIN || i > INT32_MAX) return mt_err_set(e, "%s: %s is out of range", f->name, v);
            *(int *)f->dst = (int)i;
        } else {
            *(int64_t *)f->dst = i;
        }
        return 0;
    case MT_F_DOUBLE:
        if (mt_parse_double(v, &d)) return mt_err_set(e, "%s: '%s' is not a number", f->name, v);
        if (ranged && (d < f->min || d > f->max))
            return mt_err_set(e, "%s: %s is out of range [%g, %g]", f->name, v, f->min, f->max);
        *(double *)f->dst = d;
        return 0;
    case MT_F_STR:
        *(const char **)f->dst = v;
        return 0;
    case MT_F_CHOICE:
        if (!choice_ok(f->choices, v))
            return mt_err_set(e, "%s: invalid choice '%s' (choose from %s)", f->name, v, f->choices);
        *(const char **)f->dst = v;
        return 0;
    default:
        return mt_err_set(e, "%s: internal error: bad flag type", f->name);
    }
}

int mt_flags_parse(const mt_cmd *cmd, int argc, char **argv, mt_strs *pos, bool *seen, mt_err *e)
{
    if (pos) {
        pos->v = mt_xcalloc((size_t)argc + 1, sizeof *pos->v);
        pos->n = 0;
    }
    bool only_pos = false;
    const mt_flag *lists[64]; /* the MT_F_STRS flags whose array this call allocated */
    int n_lists = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (only_pos || !is_flag(a)) {
            if (!only_pos && !strcmp(a, "-h")) {
                mt_flags_usage(cmd, stdout);
                exit(0);
            }
            if (!only_pos && a[0] == '-' && a[1] && strcmp(a, "--"))
                return mt_err_set(e, "unknown option '%s' (try --help)", a);
            if (!only_pos && !strcmp(a, "--")) {
                only_pos = true;
                continue;
            }
            if (!pos) return mt_err_set(e, "unexpected argument '%s' (try --help)", a);
            pos->v[pos->n++] = a;
            continue;
        }
        if (!strcmp(a, "--help")) {
            mt_flags_usage(cmd, stdout);
            exit(0);
        }
        if (!strcmp(a, "--version")) {
            printf("%s %s\n", cmd->name, MT_VERSION);
            exit(0);
        }
        const char *eq = strchr(a, '=');
        size_t nlen = eq ? (size_t)(eq - a) : strlen(a);
        const mt_flag *f = find_flag(cmd->flags, a, nlen);
        if (!f) {
            /* Megatron's argparse accepts underscores for a few flags; accept them everywhere. */
            char alt[128];
            if (nlen < sizeof alt) {
                memcpy(alt, a, nlen);
                alt[nlen] = 0;
                for (char *p = alt + 2; *p; p++)
                    if (*p == '_') *p = '-';
                f = find_flag(cmd->flags, alt, nlen);
            }
        }
        if (!f) return mt_err_set(e, "unknown option '%.*s' (try --help)", (int)nlen, a);
        if (seen) seen[f - cmd->flags] = true;
        if (f->type == MT_F_BOOL) {
            if (eq) return mt_err_set(e, "%s takes no value", f->name);
            *(bool *)f->dst = true;
            continue;
        }
        if (f->type == MT_F_STRS) {
            mt_strs *s = f->dst;
            bool again = false; /* given before in this command line: the last one counts */
            for (int j = 0; j < n_lists; j++) again |= lists[j] == f;
            if (again) free(s->v);
            else if (n_lists < (int)(sizeof lists / sizeof *lists)) lists[n_lists++] = f;
            s->v = mt_xcalloc((size_t)argc + 1, sizeof *s->v);
            s->n = 0;
            if (eq) s->v[s->n++] = eq + 1;
            while (i + 1 < argc && !is_flag(argv[i + 1]) && strcmp(argv[i + 1], "--")) s->v[s->n++] = argv[++i];
            if (s->n == 0) return mt_err_set(e, "%s needs at least one value", f->name);
            continue;
        }
        const char *v;
        if (eq) {
            v = eq + 1;
        } else {
            if (i + 1 >= argc) return mt_err_set(e, "%s needs a value", f->name);
            v = argv[++i];
        }
        if (set_value(f, v, e)) return -1;
    }
    return 0;
}

void mt_flags_usage(const mt_cmd *cmd, FILE *out)
{
    fprintf(out, "usage: %s %s\n\n%s\n\noptions:\n", cmd->name, cmd->synopsis, cmd->summary);
    for (const mt_flag *f = cmd->flags; f->name; f++) {
        char lhs[128];
        const char *mv = f->metavar ? f->metavar : "";
        switch (f->type) {
        case MT_F_BOOL: snprintf(lhs, sizeof lhs, "%s", f->name); break;
        case MT_F_STRS: snprintf(lhs, sizeof lhs, "%s %s...", f->name, mv); break;
        case MT_F_CHOICE: snprintf(lhs, sizeof lhs, "%s {%s}", f->name, f->choices); break;
        default: snprintf(lhs, sizeof lhs, "%s %s", f->name, mv); break;
        }
        if (strlen(lhs) <= 28)
            fprintf(out, "  %-28s %s\n", lhs, f->help);
        else
            fprintf(out, "  %s\n  %-28s %s\n", lhs, "", f->help);
    }
    fprintf(out, "  %-28s %s\n  %-28s %s\n", "-h, --help", "show this help and exit", "--version",
            "print the version and exit");
}
