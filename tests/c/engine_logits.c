/*
 * engine_logits: the engine's flat C API (csrc/engine.h) with no Python in between, so the same
 * source runs where the Cython extension cannot be built or imported: cross-compiled for aarch64
 * and run under QEMU user emulation (tests/test_arm_portable.py). Named for what it prints: the
 * logits of one prefill.
 *
 *   engine_logits WEIGHTS KEY=VALUE... -- TOKEN...
 *
 * KEY is a colibri_config field (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, n_ctx,
 * tie_embeddings, rope_theta, norm_eps, head_dim, dequantize, kernels) or `threads` (colibri_load's
 * n_threads); a field left out is 0 (rope_inv_freq is always NULL: plain rope_theta). It loads one
 * slot, prefills the tokens with COLIBRI_PREFILL_ALL_LOGITS into a fresh slot, and writes
 * n_tokens x vocab_size float32 values in the machine's byte order (little-endian on x86-64 and
 * aarch64 Linux) to stdout: exact, no decimal rounding to argue about. One line on stderr names
 * the kernel path that ran and the thread count, so a caller can check that its cap was obeyed.
 *
 * Exit status: 0 success; 1 an engine call returned a non-zero status (printed with its number and
 * colibri_strerror's text); 2 bad arguments; 3 writing stdout failed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"

static int usage(const char *why) {
    fprintf(stderr, "engine_logits: %s\nusage: engine_logits WEIGHTS KEY=VALUE... -- TOKEN...\n", why);
    return 2;
}

static int parse_long(const char *s, long *out) {
    char *end;
    errno = 0;
    *out = strtol(s, &end, 10);
    return errno == 0 && end != s && *end == '\0';
}

static int parse_float(const char *s, float *out) {
    char *end;
    errno = 0;
    *out = strtof(s, &end);
    return errno == 0 && end != s && *end == '\0';
}

/* One KEY=VALUE into cfg or *threads; 0 if the key is unknown or the value does not parse. */
static int set_option(colibri_config *cfg, int *threads, const char *arg) {
    static const struct { const char *key; size_t off; } ints[] = {
        {"dim", offsetof(colibri_config, dim)}, {"hidden_dim", offsetof(colibri_config, hidden_dim)},
        {"n_layers", offsetof(colibri_config, n_layers)}, {"n_heads", offsetof(colibri_config, n_heads)},
        {"n_kv_heads", offsetof(colibri_config, n_kv_heads)}, {"vocab_size", offsetof(colibri_config, vocab_size)},
        {"n_ctx", offsetof(colibri_config, n_ctx)}, {"tie_embeddings", offsetof(colibri_config, tie_embeddings)},
        {"head_dim", offsetof(colibri_config, head_dim)}, {"dequantize", offsetof(colibri_config, dequantize)},
        {"kernels", offsetof(colibri_config, kernels)},
    };
    const char *eq = strchr(arg, '=');
    if (eq == NULL) return 0;
    size_t klen = (size_t)(eq - arg);
    const char *val = eq + 1;
    long v;
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (strlen(ints[i].key) == klen && memcmp(arg, ints[i].key, klen) == 0) {
            if (!parse_long(val, &v)) return 0;
            *(int *)((char *)cfg + ints[i].off) = (int)v;
            return 1;
        }
    if (klen == 7 && memcmp(arg, "threads", 7) == 0) {
        if (!parse_long(val, &v)) return 0;
        *threads = (int)v;
        return 1;
    }
    if (klen == 10 && memcmp(arg, "rope_theta", 10) == 0) return parse_float(val, &cfg->rope_theta);
    if (klen == 8 && memcmp(arg, "norm_eps", 8) == 0) return parse_float(val, &cfg->norm_eps);
    return 0;
}

static int failed(const char *call, int status) {
    fprintf(stderr, "engine_logits: %s returned status %d (%s)\n", call, status, colibri_strerror(status));
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 2) return usage("no weights path");
    colibri_config cfg;
    memset(&cfg, 0, sizeof cfg);
    int threads = 0, i = 2;
    for (; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (!set_option(&cfg, &threads, argv[i])) {
            fprintf(stderr, "engine_logits: bad option '%s'\n", argv[i]);
            return 2;
        }
    if (i == argc) return usage("no '--' before the tokens");
    int n = argc - i - 1;
    if (n <= 0) return usage("no tokens");
    int *tokens = malloc(sizeof(int) * (size_t)n);
    if (tokens == NULL) return failed("malloc", COLIBRI_E_NOMEM);
    for (int t = 0; t < n; t++) {
        long v;
        if (!parse_long(argv[i + 1 + t], &v)) {
            free(tokens);
            fprintf(stderr, "engine_logits: bad token '%s'\n", argv[i + 1 + t]);
            return 2;
        }
        tokens[t] = (int)v;
    }

    colibri_engine *e = NULL;
    int st = colibri_load(argv[1], &cfg, 1, threads, &e);
    if (st != COLIBRI_OK) {
        free(tokens);
        return failed("colibri_load", st);
    }
    fprintf(stderr, "kernels=%s available=%s threads=%d\n", colibri_kernels_name(colibri_kernels(e)),
            colibri_kernels_name(colibri_kernels_available()), colibri_threads(e));
    float *logits = malloc(sizeof(float) * (size_t)n * (size_t)cfg.vocab_size);
    int reused = -1, rc = 0;
    if (logits == NULL) rc = failed("malloc", COLIBRI_E_NOMEM);
    else if ((st = colibri_prefill(e, 0, tokens, n, COLIBRI_PREFILL_ALL_LOGITS, &reused, logits)) != COLIBRI_OK)
        rc = failed("colibri_prefill", st);
    else if (reused != 0) {
        fprintf(stderr, "engine_logits: a fresh slot reused %d tokens\n", reused);
        rc = 1;
    } else if (fwrite(logits, sizeof(float), (size_t)n * (size_t)cfg.vocab_size, stdout)
                   != (size_t)n * (size_t)cfg.vocab_size || fflush(stdout) != 0) {
        fprintf(stderr, "engine_logits: writing the logits failed\n");
        rc = 3;
    }
    free(logits);
    free(tokens);
    colibri_free(e);
    return rc;
}
