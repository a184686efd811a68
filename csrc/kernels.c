/*
 * The matmul kernels (see kernels.h). Not compiled alone: each kernels_<path>.c sets an
 * instruction-set target and KERNEL_PATH, then includes this file, so every path is the same
 * source and the preprocessor's ISA macros (__AVX2__, __AVX512VNNI__, __AVXVNNI__, __AVX512BF16__) pick the
 * intrinsics each target allows; without any of them the portable loops run.
 */
#ifndef KERNEL_PATH
#error "compile kernels_<path>.c, which defines KERNEL_PATH and includes this file"
#endif
#include "kernels.h"
#include "pool.h"

#include <math.h>
#include <stdlib.h>

#define KERNEL_CAT(a, b) a##_##b
#define KERNEL_NAME(a, b) KERNEL_CAT(a, b)
#define KERNEL(fn) KERNEL_NAME(fn, KERNEL_PATH)

typedef uint16_t u16x16 __attribute__((vector_size(PANEL * sizeof(uint16_t))));
typedef uint32_t u32x16 __attribute__((vector_size(PANEL * sizeof(uint32_t))));

/* Element i of a panel as 16 floats; bfloat16 is the top half of a float's bits. */
static inline __attribute__((always_inline)) vec16 load_panel(const void *pan, size_t i, int bf16) {
    vec16 v;
    if (!bf16) {
        memcpy(&v, (const float *)pan + i, sizeof v);
    } else {
        u16x16 h;
        memcpy(&h, (const uint16_t *)pan + i, sizeof h);
        u32x16 bits = __builtin_convertvector(h, u32x16) << 16;
        memcpy(&v, &bits, sizeof v);
    }
    return v;
}

/* Bytes ahead in each panel that the 512-bit tile asks for, into L2 (prefetcht1): a decode reads CB
 * panels as CB streams once. On AMD Zen 4, 1 thread, alternating, 2 rounds: F32 decode 45-48 tok/s
 * without, 48-52 with 2 KB ahead (32 steps); BF16 64-71 without, 76-78 with 2 KB (64 steps), 72
 * with 1 KB. Several rows take it too: a tile's first four rows stream the panels as a decode
 * does, and the rest find them cached, where a prefetch costs an instruction a step; F32 prefill
 * read 358 / 634 tok/s (1 / 2 threads) before and 367 / 666 after (BENCHMARKS.md G1, G2). The
 * address is formed as an integer: it may lie past the panels' end, where a prefetch does not
 * fault but C pointer arithmetic is undefined. */
#define PANEL_AHEAD 2048

/* One register tile: RB input rows against CB panels, all n inputs. Each step j loads CB
 * weight vectors and multiplies each by RB broadcast inputs, so a weight is read once for
 * all rows of a batch and every output column keeps one running sum in a register: each
 * output is the same sequential sum over j whatever the batch size, so a batched decode
 * gives bit-identical results to a single-slot one. RB and CB are literals at every call
 * site, so the compiler unrolls both loops into RB*CB independent accumulators. */
static inline __attribute__((always_inline)) void tile(float *out, const float *x, const void *pan,
                                                     int n, int d, int col0, int RB, int CB, int BF) {
    vec16 acc[4][4] = {{{0}}};
    for (int j = 0; j < n; j++) {
        vec16 w[4];
        if (!BF || !(j & 1))  /* a 64-byte line holds one step of F32 panel, two of BF16 */
            for (int c = 0; c < CB; c++)
                __builtin_prefetch((const void *)((uintptr_t)pan + ((size_t)c * n + j) * PANEL * (BF ? 2 : 4) + PANEL_AHEAD),
                                   0, 2);
        for (int c = 0; c < CB; c++) w[c] = load_panel(pan, ((size_t)c * n + j) * PANEL, BF);
        for (int r = 0; r < RB; r++) {
            float xr = x[(size_t)r * n + j];
            for (int c = 0; c < CB; c++) acc[r][c] += w[c] * xr;
        }
    }
    for (int r = 0; r < RB; r++)
        for (int c = 0; c < CB; c++) {
            int col = col0 + c * PANEL, keep = d - col < PANEL ? d - col : PANEL;
            memcpy(out + (size_t)r * d + col, &acc[r][c], sizeof(float) * (size_t)keep);
        }
}

/* ---- the 256-bit panel tile (avx2, avxvnni) ----
 *
 * Without AVX-512 a vec16 is two registers and GCC lowers the tile above through the stack
 * (7,627 of its 10,179 instructions touch the stack), so the 256-bit paths take their own tile,
 * the same sums on __m256: a panel (16 columns) is two halves of 8 floats, h = 0 columns 0-7,
 * h = 1 columns 8-15. One output column is still one lane's sequential FMA over j, so batched
 * and single rows give bit-identical results here too. Register budget, 16 ymm: RB * CB * 2
 * accumulators (at most 12: 6 rows x 1 panel for a prefill, 1 row x 4 panels = 8 for a decode),
 * one broadcast input and the weight halves in flight. */
#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
#include <immintrin.h>
#define PANEL8 1
#define ROWS8 6  /* input rows per tile when the tile takes one panel */
/* Panel rows ahead that a several-row tile asks the memory for. One row against four panels
 * reads four streams at once; rows against one panel read one, and a decode of 4 slots took half
 * the memory bandwidth of 1 slot (BF16 49152 x 576, 4 rows: 2.66 -> 2.19 ms with 64 rows ahead,
 * best of 6, 1 row 1.56 ms; 16 ahead 2.43, 32 2.30, 128 2.18, 256 2.14: past 64 the gain is within
 * this VM's drift, and the nearer distance keeps less of the next panel waiting in cache). */
#define TILE8_AHEAD 64

/* Panel row j of panel c (from element index i) as two halves of 8 floats, columns 0-7 and 8-15;
 * bfloat16 is a float's top half, so it widens by a zero-extension and a shift, or (lanes = 1)
 * with one shuffle per half and no shift by interleaving zero words below the 16 values. That
 * shuffle stays within 128-bit lanes, so the halves then hold columns 0-3 and 8-11, 4-7 and 12-15
 * (tile8 puts them back in order at its store); each lane is still one column, so the sums are
 * the F32 panels' own either way. The interleave takes no ALU port the FMAs use: it cut four rows'
 * BF16 tile by 8%, but cost one row (four panels, eight shuffles a step on one port) 10%. */
static inline __attribute__((always_inline)) void load_halves(__m256 w[2], const void *pan, size_t i, int bf16,
                                                            int lanes) {
    if (!bf16) {
        w[0] = _mm256_loadu_ps((const float *)pan + i);
        w[1] = _mm256_loadu_ps((const float *)pan + i + 8);
        return;
    }
    if (!lanes) {
        for (int h = 0; h < 2; h++) {
            const __m128i x = _mm_loadu_si128((const __m128i *)((const uint16_t *)pan + i + 8 * h));
            w[h] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(x), 16));
        }
        return;
    }
    const __m256i v = _mm256_loadu_si256((const __m256i *)((const uint16_t *)pan + i));
    w[0] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(_mm256_setzero_si256(), v));
    w[1] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(_mm256_setzero_si256(), v));
}

/* out (RB rows, CB panels from col0) = x (RB rows, n) @ panels; acc[r][2c + h] is row r's
 * 8 columns col0 + 16c + 8h .. +7 (for BF16 with RB > 1, once reordered at the store: see
 * load_halves). RB * CB <= 6 at every call site (literals, fully unrolled). */
static inline __attribute__((always_inline)) void tile8(float *out, const float *x, const void *pan, int n, int d,
                                                      int col0, int RB, int CB, int BF) {
    const int lanes = BF && RB > 1;  /* load_halves' in-lane widening, undone at the store */
    __m256 acc[ROWS8][8];
    for (int r = 0; r < RB; r++)
        for (int k = 0; k < 2 * CB; k++) acc[r][k] = _mm256_setzero_ps();
    for (int j = 0; j < n; j++) {
        __m256 w[8];  /* the step's 2 * CB weight halves, then one input broadcast at a time */
        if (RB > 1) __builtin_prefetch((const char *)pan + (size_t)(j + TILE8_AHEAD) * PANEL * (BF ? 2 : 4));
        for (int c = 0; c < CB; c++) load_halves(w + 2 * c, pan, ((size_t)c * n + j) * PANEL, BF, lanes);
        for (int r = 0; r < RB; r++) {
            const __m256 xr = _mm256_broadcast_ss(x + (size_t)r * n + j);
            for (int k = 0; k < 2 * CB; k++) acc[r][k] = _mm256_fmadd_ps(w[k], xr, acc[r][k]);
        }
    }
    if (lanes)  /* columns (0-3, 8-11), (4-7, 12-15) -> 0-7, 8-15 */
        for (int r = 0; r < RB; r++)
            for (int c = 0; c < CB; c++) {
                const __m256 a = acc[r][2 * c], b = acc[r][2 * c + 1];
                acc[r][2 * c] = _mm256_permute2f128_ps(a, b, 0x20);
                acc[r][2 * c + 1] = _mm256_permute2f128_ps(a, b, 0x31);
            }
    for (int r = 0; r < RB; r++)
        for (int k = 0; k < 2 * CB; k++) {
            const int col = col0 + 8 * k, keep = d - col < 8 ? d - col : 8;
            if (keep == 8) {
                _mm256_storeu_ps(out + (size_t)r * d + col, acc[r][k]);
            } else if (keep > 0) {  /* the zero-padded columns past d */
                float t[8];
                _mm256_storeu_ps(t, acc[r][k]);
                memcpy(out + (size_t)r * d + col, t, sizeof(float) * (size_t)keep);
            }
        }
}

/* One row against the group's cb panels (a decode step), or up to ROWS8 rows against one panel
 * at a time (a prefill: 12 accumulators, the panel's halves read once per six rows). */
static inline __attribute__((always_inline)) void tile8_group(float *o, const float *xr, const void *pan, int n,
                                                            int d, int col0, int rb, int cb, int BF) {
    if (rb == 1) {
        switch (cb) {
        case 4: tile8(o, xr, pan, n, d, col0, 1, 4, BF); break;
        case 3: tile8(o, xr, pan, n, d, col0, 1, 3, BF); break;
        case 2: tile8(o, xr, pan, n, d, col0, 1, 2, BF); break;
        default: tile8(o, xr, pan, n, d, col0, 1, 1, BF); break;
        }
        return;
    }
    const size_t esize = BF ? sizeof(uint16_t) : sizeof(float);
    for (int c = 0; c < cb; c++) {
        const void *p = (const char *)pan + (size_t)c * n * PANEL * esize;
        const int col = col0 + c * PANEL;
        switch (rb) {
        case 6: tile8(o, xr, p, n, d, col, 6, 1, BF); break;
        case 5: tile8(o, xr, p, n, d, col, 5, 1, BF); break;
        case 4: tile8(o, xr, p, n, d, col, 4, 1, BF); break;
        case 3: tile8(o, xr, p, n, d, col, 3, 1, BF); break;
        default: tile8(o, xr, p, n, d, col, 2, 1, BF); break;
        }
    }
}
#endif

#define TILE_COLS(RB, BF)                                                                       \
    switch (cb) {                                                                               \
    case 4: tile(o, xr, pan, n, d, col0, RB, 4, BF); break;                                     \
    case 3: tile(o, xr, pan, n, d, col0, RB, 3, BF); break;                                     \
    case 2: tile(o, xr, pan, n, d, col0, RB, 2, BF); break;                                     \
    default: tile(o, xr, pan, n, d, col0, RB, 1, BF); break;                                    \
    }
#define TILE_ROWS(RB) if (bf) { TILE_COLS(RB, 1) } else { TILE_COLS(RB, 0) }

/* Every row of x against one group of cb panels (from column col0): the rows four at a time (six
 * on the 256-bit paths), so the group's panels stay in cache while a prefill streams its rows
 * past them. bf: the panels hold bfloat16. */
static void group_rows(float *out, const float *x, const void *pan, int n, int d, int col0, int rows, int cb,
                       int bf) {
#ifdef PANEL8
    for (int r = 0; r < rows; r += ROWS8) {
        const int rb = rows - r < ROWS8 ? rows - r : ROWS8;
        if (bf)
            tile8_group(out + (size_t)r * d, x + (size_t)r * n, pan, n, d, col0, rb, cb, 1);
        else
            tile8_group(out + (size_t)r * d, x + (size_t)r * n, pan, n, d, col0, rb, cb, 0);
    }
#else
    for (int r = 0; r < rows; r += 4) {
        const float *xr = x + (size_t)r * n;
        float *o = out + (size_t)r * d;
        switch (rows - r < 4 ? rows - r : 4) {
        case 4: TILE_ROWS(4) break;
        case 3: TILE_ROWS(3) break;
        case 2: TILE_ROWS(2) break;
        default: TILE_ROWS(1) break;
        }
    }
#endif
}
#undef TILE_ROWS
#undef TILE_COLS

/* From this many rows (a prefill, or a decode of that many slots), a thread widens each group of
 * BF16 panels to floats once, into its own buffer, and runs the float tile over the rows: the same
 * floats in the same sums, so the results stay identical to F32 panels', without widening every
 * weight again for each four rows (a BF16 prefill ran at 350 tok/s against F32's 637 on the same
 * path, 1 thread, avx512vnni; 598 since). Below it the panels are read as they are: half the bytes. */
#define WIDEN_ROWS 16

static void widen_group(float *wide, const uint16_t *pan, size_t count) {
    uint32_t *bits = (uint32_t *)wide;
    for (size_t i = 0; i < count; i++) bits[i] = (uint32_t)pan[i] << 16;
}

typedef struct {
    float *out; const float *x; const matrix *w;
    int rows, n, d, n_panels, n_groups, bf16, widen;
    size_t esize;
} panel_job;

static void panel_part(void *arg, int tid, int nt) {
    const panel_job *j = arg;
    float *out = j->out; const float *x = j->x; const matrix *w = j->w;
    const int rows = j->rows, n = j->n, d = j->d, n_panels = j->n_panels, n_groups = j->n_groups, bf16 = j->bf16, widen = j->widen;
    const size_t esize = j->esize;
    const int g0 = pool_share(n_groups, tid, nt), g1 = pool_share(n_groups, tid + 1, nt);
    if (g0 < g1) {
        /* n * 4 panels of floats, a multiple of 64 bytes; without it the panels are read as they are */
        float *wide = widen ? aligned_alloc(64, (size_t)n * 4 * PANEL * sizeof(float)) : NULL;
        for (int g = g0; g < g1; g++) {
            const int cb = n_panels - 4 * g < 4 ? n_panels - 4 * g : 4, col0 = 4 * g * PANEL;
            const void *pan = (const char *)w->p + (size_t)4 * g * n * PANEL * esize;
            if (wide) {
                widen_group(wide, pan, (size_t)cb * n * PANEL);
                group_rows(out, x, wide, n, d, col0, rows, cb, 0);
            } else {
                group_rows(out, x, pan, n, d, col0, rows, cb, bf16);
            }
        }
        free(wide);
    }
}

/* ---- bfloat16 pairs (W_BF16P, the avx512bf16 path) ----
 *
 * vdpbf16ps multiplies 32 bfloat16 pairs into 16 float sums: for each lane, acc + w0 * x0 + w1 * x1
 * with the products exact. A step takes inputs j and j + 1 of every row at once (one 32-bit
 * broadcast) against one 64-byte line of each panel. On AMD Zen 4, one thread, SmolLM2's MLP
 * matrices: 2.3x the F32 tile from 4 rows and 512, 2.0x for 1 row (bench/kernels/bf16_dot.c,
 * BENCHMARKS.md "BF16 pairs"). Each output column is one lane's sequential sum over the steps
 * whatever the batch, so batched rows and prefix reuse stay bit-identical to single steps. */
#if defined(__AVX512BF16__)
#include <immintrin.h>

/* x (rows, n) floats -> xb (rows, n2) bfloat16, n2 = n rounded up to even, rounded to nearest even
 * by the instruction itself (a row's tail is read masked and padded with zeros), so every input
 * takes the same rounding. */
static void round_rows_bf16(uint16_t *xb, const float *x, int rows, int n, int n2) {
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * n;
        uint16_t *o = xb + (size_t)r * n2;
        for (int i = 0; i < n2; i += 32) {
            const int left = n - i;
            const __mmask16 lo = left >= 16 ? 0xFFFF : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
            const __mmask16 hi = left >= 32 ? 0xFFFF : left > 16 ? (__mmask16)((1u << (left - 16)) - 1) : 0;
            /* a fully masked load reads nothing, but its address must still be one C allows */
            const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, hi ? xr + i + 16 : xr),
                                                   _mm512_maskz_loadu_ps(lo, lo ? xr + i : xr));
            const int keep = n2 - i < 32 ? n2 - i : 32;  /* n2 is even: whole pairs */
            _mm512_mask_storeu_epi16(o + i, keep == 32 ? 0xFFFFFFFFu : (__mmask32)((1u << keep) - 1), (__m512i)v);
        }
    }
}

/* RB rounded input rows (stride n2 values) against CB pair panels of n2 / 2 steps each. */
static inline __attribute__((always_inline)) void tile_pairs(float *out, const uint16_t *xb, const uint16_t *pan,
                                                           int n2, int d, int col0, int RB, int CB) {
    const int steps = n2 / 2;
    __m512 acc[4][4];
    for (int r = 0; r < RB; r++)
        for (int c = 0; c < CB; c++) acc[r][c] = _mm512_setzero_ps();
    for (int jp = 0; jp < steps; jp++) {
        __m512bh w[4];
        for (int c = 0; c < CB; c++) {
            const uint16_t *line = pan + ((size_t)c * steps + jp) * 2 * PANEL;  /* one 64-byte line a step */
            __builtin_prefetch((const void *)((uintptr_t)line + PANEL_AHEAD), 0, 2);
            w[c] = (__m512bh)_mm512_load_si512((const void *)line);
        }
        for (int r = 0; r < RB; r++) {
            uint32_t pair;
            memcpy(&pair, xb + (size_t)r * n2 + 2 * jp, sizeof pair);
            const __m512bh xr = (__m512bh)_mm512_set1_epi32((int)pair);
            for (int c = 0; c < CB; c++) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], w[c], xr);
        }
    }
    for (int r = 0; r < RB; r++)
        for (int c = 0; c < CB; c++) {
            const int col = col0 + c * PANEL, keep = d - col < PANEL ? d - col : PANEL;
            memcpy(out + (size_t)r * d + col, &acc[r][c], sizeof(float) * (size_t)keep);
        }
}

#define PAIR_COLS(RB)                                                                           \
    switch (cb) {                                                                               \
    case 4: tile_pairs(o, xr, pan, n2, d, col0, RB, 4); break;                                  \
    case 3: tile_pairs(o, xr, pan, n2, d, col0, RB, 3); break;                                  \
    case 2: tile_pairs(o, xr, pan, n2, d, col0, RB, 2); break;                                  \
    default: tile_pairs(o, xr, pan, n2, d, col0, RB, 1); break;                                 \
    }

/* group_rows for pair panels: the rows four at a time against the group's cb panels. */
static void group_pairs(float *out, const uint16_t *xb, const uint16_t *pan, int n2, int d, int col0, int rows,
                        int cb) {
    for (int r = 0; r < rows; r += 4) {
        const uint16_t *xr = xb + (size_t)r * n2;
        float *o = out + (size_t)r * d;
        switch (rows - r < 4 ? rows - r : 4) {
        case 4: PAIR_COLS(4) break;
        case 3: PAIR_COLS(3) break;
        case 2: PAIR_COLS(2) break;
        default: PAIR_COLS(1) break;
        }
    }
}
#undef PAIR_COLS

typedef struct {
    float *out; const uint16_t *xb; const matrix *w;
    int rows, n2, d, n_panels;
} pair_job;

/* Threads split the panels, not groups of four: a layer's narrow matrices have few groups
 * (SmolLM2's 576 outputs are 9), and a decode step, held by memory, waits for the thread with
 * the most bytes. */
static void pair_part(void *arg, int tid, int nt) {
    const pair_job *j = arg;
    const int p0 = pool_share(j->n_panels, tid, nt), p1 = pool_share(j->n_panels, tid + 1, nt);
    for (int q = p0; q < p1; q += 4) {
        const int cb = p1 - q < 4 ? p1 - q : 4;
        const uint16_t *pan = (const uint16_t *)j->w->p + (size_t)q * j->n2 * PANEL;
        group_pairs(j->out, j->xb, pan, j->n2, j->d, q * PANEL, j->rows, cb);
    }
}

/* W_BF16P: the inputs rounded once, into the scratch's q->ab (by the calling thread: rows * n
 * conversions against rows * n * d products), then the panels split among the team. */
static void pair_matmul(float *out, const float *x, const matrix *w, int rows, pool *team, uint16_t *xb) {
    const int n = w->n, d = w->d, n2 = 2 * ((n + 1) / 2), n_panels = (d + PANEL - 1) / PANEL;
    round_rows_bf16(xb, x, rows, n, n2);
    pair_job j = {out, xb, w, rows, n2, d, n_panels};
    const int threads = pool_size(team);
    if (threads > 1 && n_panels > 1 && (long)d * n * rows >= PARALLEL_MIN_WORK) pool_run(team, threads, pair_part, &j);
    else pair_part(&j, 0, 1);
}
#endif

/* Whether this path's build has the pair kernel: only a compiler that took the avx512bf16 target
 * (GCC's pragma; a clang build without -march to match has none): engine.c reports avx512bf16
 * unrunnable without it, and packs W_BF16P for no other path. */
const int KERNEL(kernel_bf16_pairs) =
#if defined(__AVX512BF16__)
    1;
#else
    0;
#endif

/* out (rows, d) = x (rows, n) @ W^T on panels. Threads split the output columns in groups of
 * four panels (group_rows). W_BF16P reaches only avx512bf16, and only a build of it with the pair
 * kernel (engine.c). */
void KERNEL(panel_matmul)(float *out, const float *x, const matrix *w, int rows, pool *team, const qinput *q) {
#if defined(__AVX512BF16__)
    if (w->kind == W_BF16P) {
        pair_matmul(out, x, w, rows, team, q->ab);
        return;
    }
#else
    (void)q;
#endif
    const int threads = pool_size(team);
    const int n = w->n, d = w->d, n_panels = (d + PANEL - 1) / PANEL, n_groups = (n_panels + 3) / 4;
    const int bf16 = w->kind == W_BF16, widen = bf16 && rows >= WIDEN_ROWS;
    const size_t esize = bf16 ? sizeof(uint16_t) : sizeof(float);
    panel_job j = {out, x, w, rows, n, d, n_panels, n_groups, bf16, widen, esize};
    if (threads > 1 && n_groups > 1 && (long)d * n * rows >= PARALLEL_MIN_WORK) pool_run(team, threads, panel_part, &j);
    else panel_part(&j, 0, 1);
}

/* The block kernels' instruction sets: with AVX-512 VNNI a 512-bit register takes two blocks of
 * bytes at once (lanes 0-7 block b, 8-15 block b + 1: QSIMD); on the 256-bit paths (QAVX2) a
 * register takes one block of bytes; on both, a 256-bit register takes two blocks of nibbles
 * (that tile beat the 512-bit one on nibbles, see qtile) and one block of any W_Q16 form;
 * elsewhere the portable loops below compute the same sums. HAVE_AVX2 (every x86 path but
 * portable, AVX-512 included): quantize_rows, the nibble tile and the byte tile. */
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define HAVE_AVX2 1
#if defined(__AVX512VNNI__) && defined(__AVX512F__)
#define QSIMD 1
#else
#define QAVX2 1
#endif
#endif

/* ---- block kernels (W_Q32, W_Q16) ----
 *
 * The input rows are quantized too, the way llama.cpp's Q8_0/Q8_1 activations are: each
 * 32-value block to int8 with scale amax/127 (nearest), keeping scale * Σq for the min term.
 * A weight block against an input block is then one integer dot product:
 *     Σ_j (scale_w q_j + min_w) (scale_a a_j) = scale_w scale_a Σ_j q_j a_j + min_w (scale_a Σ_j a_j)
 * The error against the dequantized F32 weights is the input rounding alone (at most half a
 * step of amax/127 per value), stated per format in tests/test_gguf.py. Input block scales
 * are stored four rows interleaved, so one vector multiply gives a weight block's scale
 * products for four rows. W_Q16's min term takes the same sum per 16-value half (h).
 *
 * `paired` (the 256-bit nibble tile's inputs, HAVE_AVX2 only) stores each pair of blocks b, b + 1 (b
 * even) as values 0-15 of b, 0-15 of b + 1, 16-31 of b, 16-31 of b + 1: the halves that tile
 * multiplies by one register of nibbles, each one load (input_halves). A last unpaired block
 * stays in order. */
static void quantize_rows(const float *x, int r0, int r1, int n, int paired, int8_t *q, float *d, float *s, float *si,
                          float *h) {
    const int nb = n / 32;
    for (int r = r0; r < r1; r++)
        for (int b = 0; b < nb; b++) {
            const size_t blk = (size_t)r * nb + b;
            const float *xb = x + blk * 32;
            int sum[2] = {0, 0};
#ifdef HAVE_AVX2
            /* the scalar loop's values exactly for finite inputs: the same max (NaN skipped alike),
             * the same product, rounded to nearest even as nearbyintf does in the default mode (a
             * NaN or infinite input, whose row's results are meaningless anyway, quantizes to -128
             * here and 0 there) */
            __m256 v[4], m = _mm256_setzero_ps();
            for (int k = 0; k < 4; k++) {
                v[k] = _mm256_loadu_ps(xb + 8 * k);
                m = _mm256_max_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), v[k]), m);
            }
            __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
            m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            const float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
            const float inv = amax > 0.0f ? 127.0f / amax : 0.0f, scale = amax / 127.0f;
            __m256i qi[4];
            for (int k = 0; k < 4; k++) qi[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], _mm256_set1_ps(inv)));
            /* packs interleave the 128-bit lanes: dwords come out as a0-3 b0-3 c0-3 d0-3 a4-7 ... */
            const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
            const __m256i ordered = _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            if (paired && (b | 1) < nb) {
                int8_t *pair = q + (blk - (b & 1)) * 32 + 16 * (b & 1);
                _mm_storeu_si128((__m128i *)pair, _mm256_castsi256_si128(ordered));
                _mm_storeu_si128((__m128i *)(pair + 32), _mm256_extracti128_si256(ordered, 1));
            } else {
                _mm256_storeu_si256((__m256i *)(q + blk * 32), ordered);
            }
            for (int k = 0; k < 2; k++) {
                const __m256i t = _mm256_add_epi32(qi[2 * k], qi[2 * k + 1]);
                __m128i u = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
                u = _mm_add_epi32(u, _mm_shuffle_epi32(u, _MM_SHUFFLE(1, 0, 3, 2)));
                sum[k] = _mm_cvtsi128_si32(_mm_add_epi32(u, _mm_shuffle_epi32(u, _MM_SHUFFLE(2, 3, 0, 1))));
            }
#else
            (void)paired;  /* no path without AVX2 reads the paired order */
            float amax = 0.0f;
            for (int j = 0; j < 32; j++) amax = fabsf(xb[j]) > amax ? fabsf(xb[j]) : amax;
            const float inv = amax > 0.0f ? 127.0f / amax : 0.0f, scale = amax / 127.0f;
            for (int j = 0; j < 32; j++) {
                int v = (int)nearbyintf(xb[j] * inv);
                q[blk * 32 + j] = (int8_t)v;
                sum[j / 16] += v;
            }
#endif
            d[((size_t)(r / 4) * nb + b) * 4 + r % 4] = scale;
            s[blk] = scale * (float)(sum[0] + sum[1]);
            si[((size_t)(r / 4) * nb + b) * 4 + r % 4] = s[blk];
            h[2 * blk] = scale * (float)sum[0];
            h[2 * blk + 1] = scale * (float)sum[1];
        }
}

#ifdef HAVE_AVX2
static inline float hsum8(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)));
}

/* Row r's sum of the lanes of acc[r], in lane r (rows 0-3): three horizontal adds for four rows
 * instead of a reduction each. Lane r depends on acc[r] alone, in one order whatever the others hold. */
static inline __attribute__((always_inline)) __m128 hsum8x4(const __m256 acc[4]) {
    const __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
    return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
}
#endif

/* Σ_b min_b * sum_b over a row's blocks: the weights' min term (see above). */
static inline float min_term(const float *wm, const float *as, int nb) {
    float t = 0.0f;
    int b = 0;
#ifdef HAVE_AVX2
    __m256 acc = _mm256_setzero_ps();
    for (; b + 8 <= nb; b += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(wm + b), _mm256_loadu_ps(as + b), acc);
    t = hsum8(acc);
#endif
    for (; b < nb; b++) t += wm[b] * as[b];
    return t;
}

/* The weights of one output row for the block kernel. */
typedef struct {
    const unsigned char *q;
    const float *scale, *min;
} qrow;

#ifdef QSIMD
/* Blocks b and b + 1 of a byte-form weight row as 64 unsigned bytes (b alone, upper half zero, if !two). */
static inline __attribute__((always_inline)) __m512i qweights(const qrow *w, int b, int two) {
    return two ? _mm512_loadu_si512(w->q + (size_t)b * 32)
               : _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(w->q + (size_t)b * 32)));
}

/* acc[o][r] += blocks b (and b + 1 if two) of weight row o · input row r, for OB weight rows
 * and RB input rows (see qtile). */
static inline __attribute__((always_inline)) void qblocks(__m512 acc[2][4], __m256 macc[2], const qrow *w, int b,
                                                        int two, const int8_t *aq, const float *ad, const float *ai,
                                                        int n, int OB, int RB) {
    __m512i a[4];
    for (int r = 0; r < RB; r++)
        a[r] = two ? _mm512_loadu_si512(aq + (size_t)r * n + (size_t)b * 32)
                   : _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(aq + (size_t)r * n + (size_t)b * 32)));
    /* lanes 0-3: block b's input scale in rows 0-3; lanes 4-7: block b + 1's (zero if !two) */
    const __m256 adv = two ? _mm256_loadu_ps(ad + (size_t)b * 4) : _mm256_zextps128_ps256(_mm_loadu_ps(ad + (size_t)b * 4));
    /* the same lanes of the input sums, for the min terms of four rows in one FMA (see qtile) */
    const __m256 aiv = two ? _mm256_loadu_ps(ai + (size_t)b * 4) : _mm256_zextps128_ps256(_mm_loadu_ps(ai + (size_t)b * 4));
    for (int o = 0; o < OB; o++) {
        const __m512i wv = qweights(&w[o], b, two);
        const __m256 wsv = _mm256_set_m128(_mm_set1_ps(two ? w[o].scale[b + 1] : 0.0f), _mm_set1_ps(w[o].scale[b]));
        const __m256 wmv = _mm256_set_m128(_mm_set1_ps(two ? w[o].min[b + 1] : 0.0f), _mm_set1_ps(w[o].min[b]));
        macc[o] = _mm256_fmadd_ps(wmv, aiv, macc[o]);
        const __m512 prod = _mm512_castps256_ps512(_mm256_mul_ps(wsv, adv));
        for (int r = 0; r < RB; r++) {
            const __m512i pick = _mm512_set_epi32(4 + r, 4 + r, 4 + r, 4 + r, 4 + r, 4 + r, 4 + r, 4 + r,
                                                  r, r, r, r, r, r, r, r);
            const __m512 p = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), wv, a[r]));
            acc[o][r] = _mm512_fmadd_ps(p, _mm512_permutexvar_ps(pick, prod), acc[o][r]);
        }
    }
}
#endif

#ifdef HAVE_AVX2
/* Block b of a weight row as 32 unsigned bytes, values 0-31 in order. */
static inline __attribute__((always_inline)) __m256i qweights8(const qrow *w, int b, int q4) {
    if (!q4) return _mm256_loadu_si256((const __m256i *)(w->q + (size_t)b * 32));
    /* the 16 bytes in both halves (a load, no shuffle), the upper half shifted by a nibble */
    const __m256i x = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(w->q + (size_t)b * 16)));
    return _mm256_and_si256(_mm256_srlv_epi32(x, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)), _mm256_set1_epi8(0x0f));
}

/* Σ_j w_j a_j over one block as eight int32 partial sums (w unsigned bytes, a int8).
 * VNNI (AVX-VNNI, or AVX-512 VNNI on 256-bit registers) has a u8 x s8 -> i32 instruction; plain
 * AVX2 has not: maddubs makes int16 pair sums, which saturate past 32767, so this is exact only
 * for weights that cannot reach it (qtile_bytes8 says which; the same sums either way). */
#if (defined(__AVX512VNNI__) && defined(__AVX512VL__)) || defined(__AVXVNNI__)
#define QDOT_EXACT 1  /* qdot8 is one u8 x s8 -> i32 instruction: no byte can saturate it */
#else
#define QDOT_EXACT 0
#endif

#if QDOT_EXACT
/* acc + those sums: one instruction, no int16 step (AVX-512 VNNI's on 256-bit registers, or AVX-VNNI's). */
static inline __attribute__((always_inline)) __m256i qdot8_acc(__m256i acc, __m256i w, __m256i a) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(acc, w, a);
#else
    return _mm256_dpbusd_avx_epi32(acc, w, a);
#endif
}
#endif

static inline __attribute__((always_inline)) __m256i qdot8(__m256i w, __m256i a) {
#if QDOT_EXACT
    return qdot8_acc(_mm256_setzero_si256(), w, a);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), _mm256_set1_epi16(1));
#endif
}
#endif

/* How the tile kernels read a weight block: QF_NIBBLES (quants in nibbles), QF_NARROW (bytes,
 * every quant below 64: one 16-bit pass is exact with AVX2) or QF_WIDE (a Q8_0 part). */
enum { QF_WIDE, QF_NIBBLES, QF_NARROW, QF_Q8 };

#ifdef HAVE_AVX2
/* ---- the 256-bit nibble tile (W_Q32 as nibbles: Q4_0, Q4_1, Q4_K, on every x86 path) ----
 *
 * A tile of one block per 256-bit register and one weight row per vector made every (weight
 * block, input row) pay a dot product, a conversion, a scale product and an FMA: four input rows
 * cost it 2.19x one row (perf, BENCHMARKS.md "Issue 52 targets"), and 4 slots missed 2x one slot. Here a register
 * holds two blocks, as the 512-bit byte tile does: 32 bytes of nibbles are blocks b and b + 1, so
 * their low nibbles are values 0-15 of b then of b + 1 and their high nibbles values 16-31 of
 * each, with no shuffle of the weights; the input rows are quantized in the same halves
 * (quantize_rows' paired order, one load each: input_halves). The two blocks' dot products land in
 * lanes 0-3 (block b) and 4-7 (block b + 1), and both weight rows of the tile share one vector
 * (qdot_nibbles), which takes one conversion and one FMA per input row; its scale products are
 * picked per row (pick_row) from one multiply per weight row of four rows' input scales (ad's
 * interleaved layout) by the two weight scales. */

/* Values 0-15 (upper = 0) or 16-31 (upper = 1) of input blocks b and b + 1 of one row, quantized in
 * quantize_rows' paired order (one load); b alone, in order, b + 1's half zero, if !two. */
static inline __attribute__((always_inline)) __m256i input_halves(const int8_t *a, int b, int upper, int two) {
    if (!two) return _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)(a + (size_t)b * 32 + 16 * upper)));
    return _mm256_loadu_si256((const __m256i *)(a + (size_t)b * 32 + 32 * upper));
}

/* Σ lo·alo + Σ hi·ahi for weight rows 0 and 1 (lo[o], hi[o]) against one input row, as int32
 * lanes [0, 0, 1, 1 | 0, 0, 1, 1] by weight row, each a partial sum of block b (lanes 0-3) or b + 1
 * (lanes 4-7). Folding the two rows into one vector halves the conversions and FMAs per input row,
 * which on 256-bit registers are as many as the dot products' own instructions. Without VNNI the
 * sums stay in 16 bits until the last step: a nibble pair sum is at most 2 x 15 x 127 = 3810, low
 * plus high 7620, the horizontal add of two 15240, far from saturating. A lane of row 0 never takes
 * anything from row 1, so a one-row tile (row 1 zero) gives row 0 the same sums. */
static inline __attribute__((always_inline)) __m256i qdot_nibbles(const __m256i lo[2], const __m256i hi[2], __m256i alo,
                                                                __m256i ahi) {
#if QDOT_EXACT
    __m256i d[2];
    for (int o = 0; o < 2; o++)
        d[o] = qdot8_acc(qdot8_acc(_mm256_setzero_si256(), lo[o], alo), hi[o], ahi);
    return _mm256_hadd_epi32(d[0], d[1]);
#else
    __m256i pairs[2];
    for (int o = 0; o < 2; o++)
        pairs[o] = _mm256_add_epi16(_mm256_maddubs_epi16(lo[o], alo), _mm256_maddubs_epi16(hi[o], ahi));
    return _mm256_madd_epi16(_mm256_hadd_epi16(pairs[0], pairs[1]), _mm256_set1_epi16(1));
#endif
}

/* Lanes [p0[r], p0[r], p1[r], p1[r] | p0[4 + r], p0[4 + r], p1[4 + r], p1[4 + r]]: row r's scale
 * products in qdot_nibbles' lanes (a shuffle's immediate must be a constant, hence the cases). */
static inline __attribute__((always_inline)) __m256 pick_row(__m256 p0, __m256 p1, int r) {
    switch (r) {
    case 0: return _mm256_shuffle_ps(p0, p1, 0x00);
    case 1: return _mm256_shuffle_ps(p0, p1, 0x55);
    case 2: return _mm256_shuffle_ps(p0, p1, 0xaa);
    default: return _mm256_shuffle_ps(p0, p1, 0xff);
    }
}

/* out[o + r * d] for the 256-bit tiles: acc[r] in qdot_nibbles' lanes (weight row 0 in lanes 0, 1,
 * 4, 5; row 1 in 2, 3, 6, 7), m[o] lane r row r's min term of weight row o. */
static inline __attribute__((always_inline)) void tile_store(float *out, int d, const __m256 acc[4], const __m128 m[2],
                                                           int OB, int RB) {
    __m128 h[4];
    for (int r = 0; r < 4; r++) h[r] = _mm_add_ps(_mm256_castps256_ps128(acc[r]), _mm256_extractf128_ps(acc[r], 1));
    /* lanes (row, weight row) (0, 0) (0, 1) (1, 0) (1, 1), then rows 2 and 3: the lane sums beside
     * the min terms, interleaved the same way */
    float t[8];
    _mm_storeu_ps(t, _mm_add_ps(_mm_hadd_ps(h[0], h[1]), _mm_unpacklo_ps(m[0], m[1])));
    _mm_storeu_ps(t + 4, _mm_add_ps(_mm_hadd_ps(h[2], h[3]), _mm_unpackhi_ps(m[0], m[1])));
    for (int r = 0; r < RB; r++)
        for (int o = 0; o < OB; o++) out[o + (size_t)r * d] = t[2 * r + o];
}

/* acc[r] += blocks b and b + 1 (b alone if !two) of weight rows 0 and 1 (OB of them) · input row r,
 * in qdot_nibbles' lanes, for RB input rows (see qtile); macc[o] += their min terms, min_w
 * (scale_a Σa) for rows 0-3 in lanes 0-3 (block b) and 4-7 (block b + 1), one product for four rows
 * from the input sums ai in ad's layout. */
static inline __attribute__((always_inline)) void qnibble_blocks(__m256 acc[4], __m256 macc[2], const qrow *w, int b,
                                                               int two, const int8_t *aq, const float *ad,
                                                               const float *ai, int n, int OB, int RB) {
    const __m256i low = _mm256_set1_epi8(0x0f);
    /* lanes 0-3: block b's input scale (sum) in rows 0-3; lanes 4-7: block b + 1's (zero if !two) */
    const __m256 adv = two ? _mm256_loadu_ps(ad + (size_t)b * 4) : _mm256_zextps128_ps256(_mm_loadu_ps(ad + (size_t)b * 4));
    const __m256 aiv = two ? _mm256_loadu_ps(ai + (size_t)b * 4) : _mm256_zextps128_ps256(_mm_loadu_ps(ai + (size_t)b * 4));
    __m256i lo[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()}, hi[2] = {lo[0], lo[0]};
    __m256 prod[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};  /* weight scale x input scale, in adv's lanes */
    for (int o = 0; o < OB; o++) {
        const __m256i x = two ? _mm256_loadu_si256((const __m256i *)(w[o].q + (size_t)b * 16))
                              : _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)(w[o].q + (size_t)b * 16)));
        lo[o] = _mm256_and_si256(x, low);
        hi[o] = _mm256_and_si256(_mm256_srli_epi16(x, 4), low);
        const __m256 sv = _mm256_set_m128(_mm_set1_ps(two ? w[o].scale[b + 1] : 0.0f), _mm_set1_ps(w[o].scale[b]));
        const __m256 mv = _mm256_set_m128(_mm_set1_ps(two ? w[o].min[b + 1] : 0.0f), _mm_set1_ps(w[o].min[b]));
        prod[o] = _mm256_mul_ps(sv, adv);
        macc[o] = _mm256_fmadd_ps(mv, aiv, macc[o]);
    }
    for (int r = 0; r < RB; r++) {
        const int8_t *a = aq + (size_t)r * n;
        const __m256i alo = input_halves(a, b, 0, two), ahi = input_halves(a, b, 1, two);
        const __m256 p = _mm256_cvtepi32_ps(qdot_nibbles(lo, hi, alo, ahi));
        acc[r] = _mm256_fmadd_ps(p, pick_row(prod[0], prod[1], r), acc[r]);
    }
}

/* qtile (OB weight rows x RB input rows) for QF_NIBBLES on 256-bit registers, two blocks a step.
 * The per-output work (the lane sums and the min term) is done for four rows at once, as it
 * would otherwise grow with the rows as fast as the dot products. */
static inline __attribute__((always_inline)) void qtile_nibbles8(float *out, int d, const qrow *w, int nb,
                                                               const int8_t *aq, const float *ad, const float *ai,
                                                               int n, int OB, int RB) {
    __m256 acc[4], macc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int r = 0; r < 4; r++) acc[r] = _mm256_setzero_ps();
    int b = 0;
    for (; b + 2 <= nb; b += 2) qnibble_blocks(acc, macc, w, b, 1, aq, ad, ai, n, OB, RB);
    if (b < nb) qnibble_blocks(acc, macc, w, b, 0, aq, ad, ai, n, OB, RB);
    __m128 m[2];
    for (int o = 0; o < 2; o++) m[o] = _mm_add_ps(_mm256_castps256_ps128(macc[o]), _mm256_extractf128_ps(macc[o], 1));
    tile_store(out, d, acc, m, OB, RB);
}

#endif

#ifdef HAVE_AVX2
/* qtile on 256-bit registers, one block a step, in the nibble tile's shape, for the byte forms of
 * W_Q32 (QF_WIDE, QF_NARROW, QF_Q8; half = 0) and every form of W_Q16 (half = 1): the dot products
 * of weight rows 0 and 1 against an input row are folded into one vector (a 32-bit horizontal
 * add) for one conversion and one FMA, whose scale products are picked per row from two
 * multiplies (pick_row). A block's products land in lanes 0, 1 (row 0) and 2, 3 (row 1) from
 * values 0-15, and 4-7 likewise from values 16-31, so W_Q16's two scales a block are one vector
 * [lo x 4 | hi x 4] per weight row. W_Q32's min terms of four rows are one FMA a block into macc
 * (lane r: row r); W_Q16's, a min per half block against half-block input sums, are summed per
 * output at the end (min_term). With VNNI every form takes its u8 x s8 dot exactly, Q8_0's -128 x
 * scale min included; without it QF_WIDE and QF_Q8 bytes (Q8_0's int8 + 128) could
 * saturate maddubs's 16-bit pair sums, so they take the sign trick: q - 128 is multiplied instead,
 * its magnitude against the input with its sign moved onto the input (at most 128 x 127 x 2), and
 * the 128 Σa left out is folded into the min (min + 128 scale; for Q8_0 the two cancel and neither
 * is computed). W_Q16 had a tile of its own, one weight row per vector (a conversion, a product
 * and an FMA per weight row and input row): four rows cost it 2.5-2.95x one row on plain AVX2
 * against 2.1-2.4x here (bench/kernels/tile_rows.c). */
static inline __attribute__((always_inline)) void qtile_bytes8(float *out, int d, const qrow *w, int nb,
                                                             const int8_t *aq, const float *ad, const float *ai,
                                                             const float *ah, int n, int form, int half, int OB,
                                                             int RB) {
    const int sign_trick = !QDOT_EXACT && (form == QF_Q8 || form == QF_WIDE);
    const int min_terms = !half && !(sign_trick && form == QF_Q8);
    __m256 acc[4];
    __m128 macc[2] = {_mm_setzero_ps(), _mm_setzero_ps()};
    for (int r = 0; r < 4; r++) acc[r] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const __m256 ad8 = _mm256_broadcast_ps((const __m128 *)(ad + (size_t)b * 4));  /* lane r, 4 + r: row r's */
        __m256i wv[2], ws[2], wabs[2];
        __m256 prod[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        for (int o = 0; o < 2; o++) wv[o] = ws[o] = wabs[o] = _mm256_setzero_si256();  /* a missing row 1: zero sums */
        for (int o = 0; o < OB; o++) {
            wv[o] = qweights8(&w[o], b, form == QF_NIBBLES);
            if (sign_trick) {
                ws[o] = _mm256_xor_si256(wv[o], _mm256_set1_epi8((char)0x80));
                wabs[o] = _mm256_abs_epi8(ws[o]);
            }
            const __m256 sv = half ? _mm256_set_m128(_mm_broadcast_ss(w[o].scale + 2 * b + 1),
                                                     _mm_broadcast_ss(w[o].scale + 2 * b))
                                   : _mm256_broadcast_ss(w[o].scale + b);
            prod[o] = _mm256_mul_ps(sv, ad8);
            if (min_terms) {
                const __m128 sw = _mm_set1_ps(w[o].scale[b]), ai4 = _mm_loadu_ps(ai + (size_t)b * 4);
                const __m128 mv = sign_trick ? _mm_fmadd_ps(_mm_set1_ps(128.0f), sw, _mm_set1_ps(w[o].min[b]))
                                             : _mm_set1_ps(w[o].min[b]);
                macc[o] = _mm_fmadd_ps(mv, ai4, macc[o]);
            }
        }
        for (int r = 0; r < RB; r++) {
            const __m256i a = _mm256_loadu_si256((const __m256i *)(aq + (size_t)r * n + (size_t)b * 32));
            __m256i dot[2];
            for (int o = 0; o < 2; o++) dot[o] = sign_trick ? qdot8(wabs[o], _mm256_sign_epi8(a, ws[o])) : qdot8(wv[o], a);
            const __m256 p = _mm256_cvtepi32_ps(_mm256_hadd_epi32(dot[0], dot[1]));
            acc[r] = _mm256_fmadd_ps(p, pick_row(prod[0], prod[1], r), acc[r]);
        }
    }
    if (half)
        for (int o = 0; o < OB; o++) {
            float m[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (int r = 0; r < RB; r++) {
                const float *h = ah + (size_t)r * 2 * nb;
                m[r] = min_term(w[o].min, h, 2 * nb);
                if (sign_trick) m[r] += 128.0f * min_term(w[o].scale, h, 2 * nb);
            }
            macc[o] = _mm_loadu_ps(m);
        }
    tile_store(out, d, acc, macc, OB, RB);
}
#endif

/* out[o + r * d] = weight row o · input row r for OB (1 or 2) weight rows and RB (1..4) input
 * rows: quants aq (row stride n), block scales ad (four rows interleaved), sums as (row
 * stride nb). Each weight block is unpacked once for all RB rows and each input block loaded
 * once for both weight rows. Every output is the same sequence of operations whatever OB and
 * RB are, so a batched decode gives bit-identical rows to a single one. */

static inline __attribute__((always_inline)) void qtile(float *out, int d, const qrow *w, int nb, const int8_t *aq,
                                                      const float *ad, const float *as, const float *ai, int n,
                                                      int form, int OB, int RB) {
    const int q4 = form == QF_NIBBLES;
#ifdef QSIMD
    /* Nibbles take the 256-bit tile here too: on this Xeon it ran Q4 17-20% faster than this
     * 512-bit one, whose weights cost an unpack and two lane shuffles a block pair per row (one
     * thread, 1 and 4 rows, 1536 x 576, 576 x 1536, 49152 x 576; BENCHMARKS.md "Night").
     * The per-output work, lane sums and min terms, is done for four rows at once (hsum8x4, macc:
     * lanes r and 4 + r are row r's), as it would otherwise grow with the rows as fast as the dot
     * products and make four slots cost more than twice one. */
    (void)as;
    if (q4) {
        qtile_nibbles8(out, d, w, nb, aq, ad, ai, n, OB, RB);
        return;
    }
    __m512 acc[2][4];
    __m256 macc[2];
    for (int o = 0; o < OB; o++) {
        macc[o] = _mm256_setzero_ps();
        for (int r = 0; r < 4; r++) acc[o][r] = _mm512_setzero_ps();
    }
    int b = 0;
    for (; b + 2 <= nb; b += 2) qblocks(acc, macc, w, b, 1, aq, ad, ai, n, OB, RB);
    if (b < nb) qblocks(acc, macc, w, b, 0, aq, ad, ai, n, OB, RB);
    for (int o = 0; o < OB; o++) {
        __m256 halves[4];
        for (int r = 0; r < 4; r++)
            halves[r] = _mm256_add_ps(_mm512_castps512_ps256(acc[o][r]), _mm512_extractf32x8_ps(acc[o][r], 1));
        const __m128 mins = _mm_add_ps(_mm256_castps256_ps128(macc[o]), _mm256_extractf128_ps(macc[o], 1));
        float t[4];
        _mm_storeu_ps(t, _mm_add_ps(hsum8x4(halves), mins));
        for (int r = 0; r < RB; r++) out[o + (size_t)r * d] = t[r];
    }
#elif defined(QAVX2)
    (void)as;  /* both 256-bit tiles take the sums in ad's layout (ai) */
    if (q4)
        qtile_nibbles8(out, d, w, nb, aq, ad, ai, n, OB, RB);
    else
        qtile_bytes8(out, d, w, nb, aq, ad, ai, NULL, n, form, 0, OB, RB);
#else
    (void)ai;
    for (int o = 0; o < OB; o++)
        for (int r = 0; r < RB; r++) {
            float acc = 0.0f;
            for (int b = 0; b < nb; b++) {
                const unsigned char *wq = w[o].q + (size_t)b * (q4 ? 16 : 32);
                const int8_t *a = aq + (size_t)r * n + (size_t)b * 32;
                int32_t dot = 0;
                for (int j = 0; j < 32; j++) {
                    int wj = q4 ? (j < 16 ? wq[j] & 0x0f : wq[j - 16] >> 4) : wq[j];
                    dot += wj * a[j];
                }
                acc += (float)dot * (w[o].scale[b] * ad[(size_t)b * 4 + r]);
            }
            out[o + (size_t)r * d] = acc + min_term(w[o].min, as + (size_t)r * nb, nb);
        }
#endif
}

/* qtile for W_Q16: quants with a scale and min per 16 values, input half-block sums ah (row
 * stride 2 nb) for the min term. `form`: QF_NIBBLES (every part 4-bit or less), QF_NARROW or
 * QF_WIDE (a Q8_0 part). */
static inline __attribute__((always_inline)) void qtile16(float *out, int d, const qrow *w, int nb, const int8_t *aq,
                                                        const float *ad, const float *ah, const float *ai, int n,
                                                        int form, int OB, int RB) {
#ifdef HAVE_AVX2
    qtile_bytes8(out, d, w, nb, aq, ad, ai, ah, n, form, 1, OB, RB);
#else
    (void)ai;  /* the W_Q32 tiles'; W_Q16's min term takes half-block sums */
    const int q4 = form == QF_NIBBLES;
    for (int o = 0; o < OB; o++)
        for (int r = 0; r < RB; r++) {
            float acc = 0.0f;
            for (int b = 0; b < nb; b++) {
                const unsigned char *wq = w[o].q + (size_t)b * (q4 ? 16 : 32);
                const int8_t *a = aq + (size_t)r * n + (size_t)b * 32;
                int32_t dot[2] = {0, 0};
                for (int j = 0; j < 32; j++) dot[j / 16] += (q4 ? (j < 16 ? wq[j] & 0x0f : wq[j - 16] >> 4) : wq[j]) * a[j];
                const float x = ad[(size_t)b * 4 + r];
                acc += (float)dot[0] * (w[o].scale[2 * b] * x) + (float)dot[1] * (w[o].scale[2 * b + 1] * x);
            }
            out[o + (size_t)r * d] = acc + min_term(w[o].min, ah + (size_t)r * 2 * nb, 2 * nb);
        }
#endif
}

/* A tile kernel (qtile or qtile16, with its input sums and mode) for the current ob x rb tile,
 * each shape its own inlined copy. */
#define QTILE_ROWS(FN, SUMS, MODE, OB)                                                                      \
    switch (rb) {                                                                                           \
    case 4: FN(o, d, w2, nb, aq, ad, SUMS, ai, n, MODE, OB, 4); break;                                          \
    case 3: FN(o, d, w2, nb, aq, ad, SUMS, ai, n, MODE, OB, 3); break;                                          \
    case 2: FN(o, d, w2, nb, aq, ad, SUMS, ai, n, MODE, OB, 2); break;                                          \
    default: FN(o, d, w2, nb, aq, ad, SUMS, ai, n, MODE, OB, 1); break;                                         \
    }
#define QTILE(FN, SUMS, MODE) if (ob == 2) { QTILE_ROWS(FN, SUMS, MODE, 2) } else { QTILE_ROWS(FN, SUMS, MODE, 1) }

/* Output rows per work item: a group's blocks stay in cache while the input rows pass by. */
#define QGROUP 16
/* Weight rows ahead that a tile asks for, into L2 (prefetcht1): a decode step streams every weight
 * once, and the tile's arithmetic and the memory only overlap if the loads are asked for well
 * before the tile needs them. On AMD Zen 4 (one thread, SmolLM2's matrices, 168 MB of Q8_0 a
 * step; bench/kernels/stream_rows.c) 4 rows into L1 streamed 11-12 GB/s, no prefetch 9, 16 rows
 * into L2 20 GB/s (the core reads 22-24 alone): 16 rows into L1 (23 KB, most of it) did worse. */
#define QPREFETCH 16
/* Whether the tiles read a Q8_0 matrix's mins: plain AVX2's sign trick folds them into its sums
 * (qtile_bytes8), so there they are not asked for either. */
#if defined(HAVE_AVX2) && !QDOT_EXACT
#define Q8_READS_MINS 0
#else
#define Q8_READS_MINS 1
#endif
#define QSPLIT_ROWS 16  /* input rows from which the threads share quantizing them */

/* One block matmul's arguments, for its two parallel parts (block_matmul). */
typedef struct {
    float *out; const float *x; const matrix *w; const qinput *s;
    int rows, n, d, nb, q4, half, ns, n_groups, paired;
    size_t qbytes;
} block_job;

static void block_quantize_part(void *arg, int tid, int nt) {
    const block_job *j = arg;
    const int r0 = pool_share(j->rows, tid, nt), r1 = pool_share(j->rows, tid + 1, nt);
    const qinput *s = j->s;
    if (r0 < r1) quantize_rows(j->x, r0, r1, j->n, j->paired, s->aq, s->ad, s->as, s->ai, s->ah);
}

static void block_groups_part(void *arg, int tid, int nt) {
    const block_job *j = arg;
    const int g0 = pool_share(j->n_groups, tid, nt), g1 = pool_share(j->n_groups, tid + 1, nt);
    float *out = j->out;
    const matrix *w = j->w;
    const qinput *s = j->s;
    const int rows = j->rows, n = j->n, d = j->d, nb = j->nb, q4 = j->q4, half = j->half, ns = j->ns;
    const size_t qbytes = j->qbytes;
    const int row_end = g1 * QGROUP < d ? g1 * QGROUP : d;  /* past this thread's last row */
    const int streams = w->q8 && !half && !Q8_READS_MINS ? 2 : 3;  /* quants, scales, mins if read */
    for (int g = g0; g < g1; g++) {
        const int o_end = (g + 1) * QGROUP < d ? (g + 1) * QGROUP : d;
        for (int r = 0; r < rows; r += 4) {
            const int rb = rows - r < 4 ? rows - r : 4;
            const int8_t *aq = s->aq + (size_t)r * n;
            const float *ad = s->ad + (size_t)r * nb, *as = s->as + (size_t)r * nb;  /* r is a multiple of 4 */
            const float *ai = s->ai + (size_t)r * nb;
            const float *ah = s->ah + (size_t)r * 2 * nb;
            for (int row = g * QGROUP; row < o_end; row += 2) {
                const int ob = o_end - row < 2 ? o_end - row : 2;
                qrow w2[2];
                for (int i = 0; i < ob; i++)
                    w2[i] = (qrow){(const unsigned char *)w->p + (size_t)(row + i) * qbytes,
                                   w->scale + (size_t)(row + i) * ns, w->min + (size_t)(row + i) * ns};
                /* decode streams W from memory once: ask for it early, within this thread's groups (the
                 * next thread's rows would land in another core's L2) */
                if (row + QPREFETCH + ob <= row_end) {
                    const char *ahead[3] = {(const char *)w2[0].q + QPREFETCH * qbytes,
                                            (const char *)(w2[0].scale + QPREFETCH * (size_t)ns),
                                            (const char *)(w2[0].min + QPREFETCH * (size_t)ns)};
                    const size_t len[3] = {ob * qbytes, ob * ns * sizeof(float), ob * ns * sizeof(float)};
                    for (int k = 0; k < streams; k++)
                        for (size_t off = 0; off < len[k]; off += 64) __builtin_prefetch(ahead[k] + off, 0, 2);
                }
                float *o = out + (size_t)r * d + row;
                if (half) {
                    if (q4) {
                        QTILE(qtile16, ah, QF_NIBBLES)
                    } else if (w->narrow) {
                        QTILE(qtile16, ah, QF_NARROW)
                    } else {
                        QTILE(qtile16, ah, QF_WIDE)
                    }
                } else if (q4) {
                    QTILE(qtile, as, QF_NIBBLES)
                } else if (w->q8) {
                    QTILE(qtile, as, QF_Q8)
                } else if (w->narrow) {
                    QTILE(qtile, as, QF_NARROW)
                } else {
                    QTILE(qtile, as, QF_WIDE)
                }
            }
        }
    }
}

/* out (rows, d) = x (rows, n) @ W^T on blocks. The input rows are quantized once (into s),
 * then threads split the output rows in groups of QGROUP; each group takes its weight rows
 * two at a time against the input rows four at a time. */
void KERNEL(block_matmul)(float *out, const float *x, const matrix *w, int rows, pool *team, const qinput *s) {
    const int threads = pool_size(team);
    const int n = w->n, d = w->d, nb = n / 32, q4 = w->nibbles, n_groups = (d + QGROUP - 1) / QGROUP;
    const int half = w->kind == W_Q16, ns = half ? 2 * nb : nb;  /* scales (and mins) per weight row */
    const size_t qbytes = (size_t)nb * (q4 ? 16 : 32);
    const int par = threads > 1 && n_groups > 1 && (long)d * n * rows >= PARALLEL_MIN_WORK;
#ifdef HAVE_AVX2
    const int paired = q4 && !half;  /* the nibble tile's input order (quantize_rows) */
#else
    const int paired = 0;
#endif
    /* A prefill's rows are quantized by every thread (done by one, it was a serial stretch of each
     * matmul that the other threads waited out); a decode's few rows by the caller alone, which
     * saves a wait between quantizing and the tiles. */
    const int split = par && rows >= QSPLIT_ROWS;
    block_job j = {out, x, w, s, rows, n, d, nb, q4, half, ns, n_groups, paired, qbytes};
    if (split) pool_run(team, threads, block_quantize_part, &j);
    else quantize_rows(x, 0, rows, n, paired, s->aq, s->ad, s->as, s->ai, s->ah);
    if (par) pool_run(team, threads, block_groups_part, &j);
    else block_groups_part(&j, 0, 1);
}
#undef QTILE
#undef QTILE_ROWS
