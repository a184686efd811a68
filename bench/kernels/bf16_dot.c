/*
 * Would an AVX-512 BF16 kernel pay? (issue 52, point 2: kernels measured, not assumed.)
 *
 * Without AVX-512 BF16 the engine keeps BF16 weights as bfloat16 panels and widens them to floats
 * inside the panel kernel (csrc/kernels.c, `tile`), or for 16 rows or more once a matmul into
 * float panels: an exact product against float inputs. A CPU with AVX-512 BF16 (Intel Cooper
 * Lake and later, AMD Zen 4 and later) has vdpbf16ps, which multiplies 32 bfloat16 pairs per
 * instruction straight into 16 float sums, as llama.cpp's BF16 dot product does; it needs the
 * inputs rounded to bfloat16 too, and the weights stored as pairs along the input axis (the
 * engine's avx512bf16 path since 2026-12-06). This program times three kernels on one matmul of
 * the engine's shapes, one thread: widening every four rows, the float tile on panels widened
 * beforehand (what a 16-row matmul runs without the pairs), and the pairs; and checks that the
 * pair kernel computes what the widening one computes on inputs rounded the same way.
 *
 *     gcc -O3 -march=native bench/kernels/bf16_dot.c -o /tmp/bf16_dot && /tmp/bf16_dot
 *
 * Prints, per shape and row count: best-of-5 microseconds per matmul for each kernel and the
 * ratios widen / pairs and floats / pairs (above 1: the pair kernel is faster). Exits 2 without
 * AVX-512 BF16.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PANEL 16

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* The engine's float tile, RB rows x CB panels (d/16, n, 16): of bfloat16 widened on load (BF = 1),
 * or of floats widened beforehand (BF = 0). */
static inline __attribute__((always_inline)) void tile_panels(float *out, const float *x, const void *pan, int n,
                                                            int d, int col0, int RB, int CB, int BF) {
    __m512 acc[4][4];
    for (int r = 0; r < RB; r++)
        for (int c = 0; c < CB; c++) acc[r][c] = _mm512_setzero_ps();
    for (int j = 0; j < n; j++) {
        __m512 w[4];
        for (int c = 0; c < CB; c++) {
            const size_t i = ((size_t)c * n + j) * PANEL;
            if (BF) {
                __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)pan + i));
                w[c] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
            } else {
                w[c] = _mm512_loadu_ps((const float *)pan + i);
            }
        }
        for (int r = 0; r < RB; r++) {
            __m512 xr = _mm512_set1_ps(x[(size_t)r * n + j]);
            for (int c = 0; c < CB; c++) acc[r][c] = _mm512_fmadd_ps(w[c], xr, acc[r][c]);
        }
    }
    for (int r = 0; r < RB; r++)
        for (int c = 0; c < CB; c++) _mm512_storeu_ps(out + (size_t)r * d + col0 + c * PANEL, acc[r][c]);
}

/* The pair form: panels (d/16, n/2, 16, 2), input j and j+1 of a column side by side; the
 * inputs as bfloat16 (rows, n), one pair broadcast as a 32-bit lane. */
static inline __attribute__((always_inline)) void tile_pairs(float *out, const uint16_t *xb, const uint16_t *pan, int n,
                                                           int d, int col0, int RB, int CB) {
    __m512 acc[4][4];
    for (int r = 0; r < RB; r++)
        for (int c = 0; c < CB; c++) acc[r][c] = _mm512_setzero_ps();
    for (int jp = 0; jp < n / 2; jp++) {
        __m512i w[4];
        for (int c = 0; c < CB; c++) w[c] = _mm512_loadu_si512(pan + ((size_t)c * (n / 2) + jp) * 2 * PANEL);
        for (int r = 0; r < RB; r++) {
            uint32_t pair;
            memcpy(&pair, xb + (size_t)r * n + 2 * jp, sizeof pair);
            __m512i xr = _mm512_set1_epi32((int)pair);
            for (int c = 0; c < CB; c++) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], (__m512bh)w[c], (__m512bh)xr);
        }
    }
    for (int r = 0; r < RB; r++)
        for (int c = 0; c < CB; c++) _mm512_storeu_ps(out + (size_t)r * d + col0 + c * PANEL, acc[r][c]);
}

/* The float tile's matmul as the engine runs one: groups of 4 panels, the rows 4 at a time within a
 * group (rows a multiple of 4, or 1; d a multiple of 64); bf: the panels hold bfloat16. */
static void matmul_panels(float *out, const float *x, const void *p, int n, int d, int rows, int bf) {
    const size_t esize = bf ? sizeof(uint16_t) : sizeof(float);
    for (int g = 0; g < d / 64; g++) {
        const void *pan = (const char *)p + (size_t)4 * g * n * PANEL * esize;
        for (int r = 0; r < rows; r += 4) {
            float *o = out + (size_t)r * d;
            const float *xr = x + (size_t)r * n;
            if (rows == 1) bf ? tile_panels(o, xr, pan, n, d, 64 * g, 1, 4, 1) : tile_panels(o, xr, pan, n, d, 64 * g, 1, 4, 0);
            else bf ? tile_panels(o, xr, pan, n, d, 64 * g, 4, 4, 1) : tile_panels(o, xr, pan, n, d, 64 * g, 4, 4, 0);
        }
    }
}

static void matmul_pairs(float *out, const float *x, uint16_t *xb, const uint16_t *p, int n, int d, int rows) {
    for (size_t i = 0; i < (size_t)rows * n; i += 32) {  /* round the inputs: n a multiple of 32 */
        __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
        _mm512_storeu_si512(xb + i, (__m512i)v);
    }
    for (int g = 0; g < d / 64; g++) {
        const uint16_t *pan = p + (size_t)4 * g * n * PANEL;
        if (rows == 1) tile_pairs(out, xb, pan, n, d, 64 * g, 1, 4);
        else for (int r = 0; r < rows; r += 4) tile_pairs(out + (size_t)r * d, xb + (size_t)r * n, pan, n, d, 64 * g, 4, 4);
    }
}

static uint16_t to_bf16(float f) {  /* round to nearest even, as vcvtne2ps2bf16 (finite inputs) */
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return (uint16_t)((b + 0x7FFF + ((b >> 16) & 1)) >> 16);
}

static float from_bf16(uint16_t h) {
    uint32_t b = (uint32_t)h << 16;
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static double run(int n, int d, int rows) {
    uint16_t *w = malloc(sizeof *w * (size_t)n * d), *panels = aligned_alloc(64, sizeof *w * (size_t)n * d),
             *pairs = aligned_alloc(64, sizeof *w * (size_t)n * d), *xb = aligned_alloc(64, sizeof *xb * (size_t)rows * n);
    float *x = aligned_alloc(64, sizeof *x * (size_t)rows * n), *xr = malloc(sizeof *xr * (size_t)rows * n),
          *floats = aligned_alloc(64, sizeof *floats * (size_t)n * d),
          *o1 = aligned_alloc(64, sizeof *o1 * (size_t)rows * d), *o2 = aligned_alloc(64, sizeof *o2 * (size_t)rows * d);
    srand(7);
    for (size_t i = 0; i < (size_t)n * d; i++) w[i] = to_bf16(((float)rand() / RAND_MAX - 0.5f) * 0.1f);
    for (size_t i = 0; i < (size_t)rows * n; i++) {
        x[i] = (float)rand() / RAND_MAX - 0.5f;
        xr[i] = from_bf16(to_bf16(x[i]));
    }
    for (int o = 0; o < d; o++)  /* w is (d, n): column o of the output */
        for (int j = 0; j < n; j++) {
            size_t q = o / PANEL, c = o % PANEL;
            panels[(q * n + j) * PANEL + c] = w[(size_t)o * n + j];
            pairs[((q * (n / 2) + j / 2) * PANEL + c) * 2 + j % 2] = w[(size_t)o * n + j];
        }
    for (size_t i = 0; i < (size_t)n * d; i++) floats[i] = from_bf16(panels[i]);
    /* same product: the widening kernel on the rounded inputs against the pair kernel */
    matmul_panels(o1, xr, panels, n, d, rows, 1);
    matmul_pairs(o2, x, xb, pairs, n, d, rows);
    double worst = 0;
    for (size_t i = 0; i < (size_t)rows * d; i++) {
        double e = fabs(o1[i] - o2[i]) / (fabs(o1[i]) + 1e-3);
        worst = e > worst ? e : worst;
    }
    /* vdpbf16ps adds a pair's two products before the running sum: the same exact products, rounded
     * in another order (1.5e-4 at worst measured on Zen 4, over sums of 1536); a wrong layout is off
     * by the size of the values */
    if (worst > 1e-3) printf("  pair kernel differs: worst relative error %.2g\n", worst);
    int iters = rows == 1 ? 2000 : 20;
    double bw = 1e9, bp = 1e9, bf = 1e9;
    for (int rep = 0; rep < 5; rep++) {
        double t = now();
        for (int i = 0; i < iters; i++) matmul_panels(o1, x, panels, n, d, rows, 1);
        double tw = (now() - t) / iters;
        t = now();
        for (int i = 0; i < iters; i++) matmul_pairs(o2, x, xb, pairs, n, d, rows);
        double tp = (now() - t) / iters;
        t = now();
        for (int i = 0; i < iters; i++) matmul_panels(o1, x, floats, n, d, rows, 0);
        double tf = (now() - t) / iters;
        bw = tw < bw ? tw : bw;
        bf = tf < bf ? tf : bf;
        bp = tp < bp ? tp : bp;
    }
    printf("| %d x %d | %d | %.1f | %.1f | %.1f | %.2f× | %.2f× |\n", d, n, rows, bw * 1e6, bf * 1e6, bp * 1e6, bw / bp,
           bf / bp);
    free(floats); free(w); free(panels); free(pairs); free(xb); free(x); free(xr); free(o1); free(o2);
    return bw / bp;
}

int main(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512bf16")) {
        fprintf(stderr, "this CPU has no AVX-512 BF16\n");
        return 2;
    }
    /* SmolLM2-135M's matrices: the MLP's up projection (1536 x 576) and down (576 x 1536) */
    printf("| W (d x n) | rows | widen µs | floats µs | pairs µs | widen / pairs | floats / pairs |\n"
           "|---|---|---|---|---|---|---|\n");
    const int shapes[2][2] = {{1536, 576}, {576, 1536}}, rows[3] = {1, 4, 512};
    for (int s = 0; s < 2; s++)
        for (int r = 0; r < 3; r++) run(shapes[s][1], shapes[s][0], rows[r]);
    return 0;
}
