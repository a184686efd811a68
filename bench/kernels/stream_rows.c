/*
 * How fast one decode step streams the weights through a block kernel (issue 52: Q8_0 decode on
 * AMD Zen 4 read 0.55x llama.cpp). A step of one slot reads every weight once from memory, so
 * its time is the kernel's arithmetic and the memory's, and how well the two overlap; the
 * in-cache figures of tile_rows.c say nothing of the second. This program lays out SmolLM2-135M's
 * matrices (30 layers of a fused q/k/v 960 x 576, o 576 x 576, a fused gate/up 3072 x 576 and
 * down 576 x 1536, then the 49152 x 576 output projection, Q8_0) in the engine's form (its quants,
 * scales and mins; here three allocations a matrix, in the engine one), random
 * values, and times one row through all of them on one thread: best of 40 steps, in ms and GB/s,
 * beside a plain read of as many bytes (what one core can stream).
 *
 *     gcc -O3 -march=x86-64-v3 -fopenmp-simd -std=c11 -ffp-contract=fast -w -I CSRC \
 *         bench/kernels/stream_rows.c CSRC/pool.c CSRC/kernels_{avx2,avxvnni,avx512vnni,portable}.c -lm -lpthread \
 *         -o /tmp/stream_rows
 *     /tmp/stream_rows [q8|q4] [avx2|avx512vnni]    (q4: the layers as Q4_1 nibbles, the output Q8_0)
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <immintrin.h>
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

enum { LAYERS = 30, STEPS = 40 };

int main(int argc, char **argv) {
    const int q4 = argc > 1 && !strcmp(argv[1], "q4");
    const char *path = argc > 2 ? argv[2] : "avx512vnni";
    block_fn fn = block_matmul_avx2;
    if (!strcmp(path, "avx512vnni")) {
        if (!__builtin_cpu_supports("avx512vnni") || !__builtin_cpu_supports("avx512vl")) {
            fprintf(stderr, "this CPU has no AVX-512 VNNI\n");
            return 2;
        }
        fn = block_matmul_avx512vnni;
    } else if (strcmp(path, "avx2")) {
        fprintf(stderr, "usage: %s [q8|q4] [avx2|avx512vnni]\n", argv[0]);
        return 2;
    }
    static const int shapes[4][2] = {{960, 576}, {576, 576}, {3072, 576}, {576, 1536}};
    matrix m[LAYERS * 4 + 1];
    int count = 0;
    size_t bytes = 0;
    for (int l = 0; l <= LAYERS; l++)
        for (int k = 0; k < (l < LAYERS ? 4 : 1); k++) {
            const int d = l < LAYERS ? shapes[k][0] : 49152, n = l < LAYERS ? shapes[k][1] : 576, nb = n / 32;
            const int nibbles = q4 && l < LAYERS;
            const size_t qb = (size_t)d * nb * (nibbles ? 16 : 32), ns = (size_t)d * nb;
            unsigned char *q = aligned_alloc(64, (qb + 63) / 64 * 64);
            float *scale = malloc(ns * sizeof(float)), *min = malloc(ns * sizeof(float));
            for (size_t i = 0; i < qb; i++) q[i] = (unsigned char)rand();
            for (size_t i = 0; i < ns; i++) scale[i] = 1e-3f, min[i] = nibbles ? -8e-3f : -0.128f;
            m[count++] = (matrix){.kind = W_Q32, .n = n, .d = d, .p = q, .scale = scale, .min = min,
                                  .nibbles = nibbles, .q8 = !nibbles};
            bytes += qb + 2 * ns * sizeof(float);
        }
    float *x = malloc(sizeof(float) * 1536), *out = malloc(sizeof(float) * 49152);
    for (int i = 0; i < 1536; i++) x[i] = (float)(rand() % 200 - 100) / 100.0f;
    qinput s = {malloc(1536), malloc(sizeof(float) * 4 * 48), malloc(sizeof(float) * 4 * 48),
                malloc(sizeof(float) * 4 * 48), malloc(sizeof(float) * 8 * 48)};
    double best = 1e9;
    for (int step = 0; step < STEPS; step++) {
        const double t = now();
        for (int i = 0; i < count; i++) fn(out, x, &m[i], 1, NULL, &s);
        const double dt = now() - t;
        if (dt < best) best = dt;
    }
    /* the same number of bytes read with plain 256-bit loads */
    char *plain = aligned_alloc(64, (bytes + 255) / 256 * 256);
    memset(plain, 1, (bytes + 255) / 256 * 256);
    double read = 1e9;
    __m256i acc = _mm256_setzero_si256();
    for (int step = 0; step < 10; step++) {
        const double t = now();
        for (size_t i = 0; i + 256 <= bytes; i += 256)
            for (int k = 0; k < 8; k++) acc = _mm256_add_epi32(acc, _mm256_load_si256((const __m256i *)(plain + i + 32 * k)));
        const double dt = now() - t;
        if (dt < read) read = dt;
    }
    int sink[8];
    _mm256_storeu_si256((__m256i *)sink, acc);
    printf("%s, %s, 1 row: %.2f ms a step, %.1f MB, %.1f GB/s; a plain read of as many bytes %.1f GB/s%s\n",
           q4 ? "Q4_1 layers + Q8_0 output" : "Q8_0", path, best * 1e3, bytes / 1e6, bytes / best / 1e9,
           bytes / read / 1e9, sink[0] == 12345 ? " " : "");
    return 0;
}
