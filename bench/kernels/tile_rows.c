/*
 * What four input rows cost a matmul kernel against one (issue 52: 4 slots >= 2x one slot).
 *
 * A decode step of 4 slots runs every matmul on 4 rows, a step of 1 slot on 1 row; when the
 * 1-row step is itself compute-bound (one core, weights in cache), the 4-slot gain can be no more
 * than 4 x (1-row time) / (4-row time). This program times the engine's own kernels, linked from
 * a checkout's csrc, on random weights of SmolLM2's shapes, one thread, and checks what they
 * compute: the block kernels against the portable path (within the float rounding order), BF16
 * panels against F32 panels of the same values (bit for bit), and one row against the same row
 * in a batch of four (bit for bit).
 *
 *     gcc -O3 -march=x86-64-v3 -fopenmp-simd -std=c11 -ffp-contract=fast -w -I CSRC \
 *         bench/kernels/tile_rows.c CSRC/pool.c CSRC/kernels_{avx2,avxvnni,avx512vnni,portable}.c -lm -lpthread \
 *         -o /tmp/tile_rows
 *     (checkouts before the engine's thread team, 2026-12-06, have no pool.c: leave it out there)
 *     /tmp/tile_rows [avx2|avxvnni|avx512vnni] [calls]
 *
 * CSRC is a checkout's csrc folder: build it from two checkouts and run them in turn to compare
 * kernels before and after a change (this VM's speed drifts, so alternate and read ratios).
 * Prints, per form and shape: the best microseconds for 1 and for 4 rows, their ratio, and the
 * checks. Exits 1 if a check fails.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static float uniform(void) { return (float)(rand() % 2001 - 1000) / 1000.0f; }

enum { ROWS = 4 };

/* Best time of `calls` calls for 1 and for 4 rows, alternating. */
typedef void (*run_fn)(void *ctx, float *out, const float *x, int rows);

static void best_of(run_fn run, void *ctx, float *out, const float *x, int calls, double best[2]) {
    best[0] = best[1] = 1e9;
    for (int c = 0; c < calls; c++)
        for (int k = 0; k < 2; k++) {
            const double t = now();
            run(ctx, out, x, k ? ROWS : 1);
            const double dt = now() - t;
            if (dt < best[k]) best[k] = dt;
        }
}

typedef struct { block_fn fn; const matrix *w; const qinput *q; } block_ctx;
static void run_block(void *ctx, float *out, const float *x, int rows) {
    const block_ctx *b = ctx;
    b->fn(out, x, b->w, rows, NULL, b->q);
}

typedef struct { panel_fn fn; const matrix *w; } panel_ctx;
static void run_panel(void *ctx, float *out, const float *x, int rows) {
    const panel_ctx *p = ctx;
    p->fn(out, x, p->w, rows, NULL, NULL);
}

/* A block matrix: forms 0-3 W_Q32, 0 nibbles (Q4_1), 1 Q8_0, 2 bytes of any value (Q5_1-like), 3 bytes
 * < 64 (Q5_0); forms 4-6 W_Q16 (a scale and min per 16 values), 4 nibbles (Q2_K, Q3_K), 5 bytes < 64
 * (Q6_K), 6 bytes of any value (Q8_0 fused with Q6_K: the sign trick without VNNI). */
static int block_case(block_fn fn, int form, int d, int n, int calls) {
    static const char *names[] = {"Q4 nibbles", "Q8_0", "wide bytes", "narrow bytes", "Q16 nibbles", "Q16 narrow", "Q16 wide"};
    const int nb = n / 32, half = form >= 4, nibbles = form == 0 || form == 4, ns = d * nb * (half ? 2 : 1);
    const size_t qbytes = (size_t)d * nb * (nibbles ? 16 : 32);
    matrix w = {.kind = half ? W_Q16 : W_Q32, .n = n, .d = d, .nibbles = nibbles, .q8 = form == 1,
                .narrow = form == 3 || form == 5};
    unsigned char *q = malloc(qbytes);
    w.scale = malloc(sizeof(float) * ns);
    w.min = malloc(sizeof(float) * ns);
    for (size_t i = 0; i < qbytes; i++) q[i] = (unsigned char)(rand() & (form == 3 || form == 5 ? 63 : 255));
    for (int i = 0; i < ns; i++) {
        w.scale[i] = 0.0001f * (float)(1 + rand() % 100);
        w.min[i] = form == 1 ? -128.0f * w.scale[i] : -0.0005f * (float)(rand() % 100);
    }
    w.p = q;
    float *x = malloc(sizeof(float) * ROWS * n), *out = malloc(sizeof(float) * ROWS * d);
    float *ref = malloc(sizeof(float) * ROWS * d), *one = malloc(sizeof(float) * d);
    for (int i = 0; i < ROWS * n; i++) x[i] = uniform();
    qinput s = {malloc((size_t)ROWS * n), malloc(sizeof(float) * ROWS * nb), malloc(sizeof(float) * ROWS * nb),
                malloc(sizeof(float) * ROWS * nb), malloc(sizeof(float) * ROWS * 2 * nb)};
    block_matmul_portable(ref, x, &w, ROWS, NULL, &s);
    fn(out, x, &w, ROWS, NULL, &s);
    fn(one, x, &w, 1, NULL, &s);
    double diff = 0, top = 0;
    for (int i = 0; i < ROWS * d; i++) {
        diff = fmax(diff, fabs(out[i] - ref[i]));
        top = fmax(top, fabs(ref[i]));
    }
    const int same = memcmp(one, out, sizeof(float) * d) == 0, close = diff <= 1e-5 * top;
    block_ctx ctx = {fn, &w, &s};
    double best[2];
    best_of(run_block, &ctx, out, x, calls, best);
    printf("%-13s %5d x %-5d rows 1 %7.1f us, rows 4 %7.1f us, 4 / 1 %.2fx | vs portable %.1e of %.1e %s, "
           "1 row = batched %s\n", names[form], d, n, best[0] * 1e6, best[1] * 1e6, best[1] / best[0], diff, top,
           close ? "ok" : "FAIL", same ? "ok" : "FAIL");
    free(q), free(w.scale), free(w.min), free(x), free(out), free(ref), free(one);
    free(s.aq), free(s.ad), free(s.as), free(s.ai), free(s.ah);
    return close && same;
}

/* W_BF16 panels, and W_F32 panels of the same values for the check. */
static int panel_case(panel_fn fn, int d, int n, int calls) {
    const size_t count = (size_t)(d + PANEL - 1) / PANEL * n * PANEL;
    uint16_t *bf = aligned_alloc(64, (count * sizeof(uint16_t) + 63) / 64 * 64);
    float *f32 = aligned_alloc(64, count * sizeof(float));
    for (size_t i = 0; i < count; i++) {
        const float v = uniform();
        uint32_t bits;
        memcpy(&bits, &v, sizeof bits);
        bf[i] = (uint16_t)(bits >> 16);
        bits = (uint32_t)bf[i] << 16;
        memcpy(&f32[i], &bits, sizeof bits);
    }
    matrix w = {.kind = W_BF16, .n = n, .d = d, .p = bf}, wf = {.kind = W_F32, .n = n, .d = d, .p = f32};
    float *x = malloc(sizeof(float) * ROWS * n), *out = malloc(sizeof(float) * ROWS * d);
    float *ref = malloc(sizeof(float) * ROWS * d), *one = malloc(sizeof(float) * d);
    for (int i = 0; i < ROWS * n; i++) x[i] = uniform();
    fn(out, x, &w, ROWS, NULL, NULL);  /* no qinput: W_BF16 and W_F32 panels never read it */
    fn(ref, x, &wf, ROWS, NULL, NULL);
    fn(one, x, &w, 1, NULL, NULL);
    const int exact = memcmp(out, ref, sizeof(float) * ROWS * d) == 0, same = memcmp(one, out, sizeof(float) * d) == 0;
    panel_ctx ctx = {fn, &w};
    double best[2];
    best_of(run_panel, &ctx, out, x, calls, best);
    printf("%-13s %5d x %-5d rows 1 %7.1f us, rows 4 %7.1f us, 4 / 1 %.2fx | = F32 panels %s, 1 row = batched %s\n",
           "BF16 panels", d, n, best[0] * 1e6, best[1] * 1e6, best[1] / best[0], exact ? "ok" : "FAIL",
           same ? "ok" : "FAIL");
    free(bf), free(f32), free(x), free(out), free(ref), free(one);
    return exact && same;
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "avx2";
    const int calls = argc > 2 ? atoi(argv[2]) : 300;
    block_fn block = block_matmul_avx2;
    panel_fn panel = panel_matmul_avx2;
    if (!strcmp(path, "avxvnni")) {
        if (!__builtin_cpu_supports("avxvnni")) {
            fprintf(stderr, "this CPU has no AVX-VNNI\n");
            return 2;
        }
        block = block_matmul_avxvnni, panel = panel_matmul_avxvnni;
    } else if (!strcmp(path, "avx512vnni")) {
        if (!__builtin_cpu_supports("avx512vnni") || !__builtin_cpu_supports("avx512vl")) {
            fprintf(stderr, "this CPU has no AVX-512 VNNI\n");
            return 2;
        }
        block = block_matmul_avx512vnni, panel = panel_matmul_avx512vnni;
    } else if (strcmp(path, "avx2")) {
        fprintf(stderr, "usage: %s [avx2|avxvnni|avx512vnni] [calls]\n", argv[0]);
        return 2;
    }
    srand(1);
    printf("path %s, 1 thread, best of %d calls\n", path, calls);
    int ok = 1;
    /* SmolLM2-135M: gate and up (1536 x 576), down (576 x 1536), the output projection (49152 x 576) */
    ok &= block_case(block, 0, 1536, 576, calls);
    ok &= block_case(block, 0, 576, 1536, calls);
    ok &= block_case(block, 1, 1536, 576, calls);
    ok &= block_case(block, 1, 8192, 576, calls / 4 + 1);
    ok &= block_case(block, 2, 1536, 576, calls);
    ok &= block_case(block, 3, 1536, 576, calls);
    /* W_Q16: Q3_K or Q2_K down projections (the SmolLM2 Q2_K files), Q6_K in a Q4_K_M file, and a
     * Q6_K output projection (a Q4_K_M Llama's) */
    ok &= block_case(block, 4, 576, 1536, calls);
    ok &= block_case(block, 5, 576, 1536, calls);
    ok &= block_case(block, 5, 8192, 576, calls / 4 + 1);
    ok &= block_case(block, 6, 576, 1536, calls);
    ok &= panel_case(panel, 1536, 576, calls);
    ok &= panel_case(panel, 576, 1536, calls);
    return ok ? 0 : 1;
}
