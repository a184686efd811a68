/*
 * Matmul kernels, compiled once per kernel path (kernels_<path>.c: the same code under another
 * instruction-set target), and the weight layout they read. Private to the engine: engine.c picks
 * a path at load (colibri_config.kernels, engine.h) and calls it through a kernel_set.
 */
#ifndef COLIBRI_KERNELS_H
#define COLIBRI_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Below this many multiply-adds a parallel region costs more than it saves (and, on a busy
 * machine, a barrier waiting for a descheduled thread costs far more). */
#define PARALLEL_MIN_WORK (1L << 14)

#define PANEL 16  /* output columns per panel: one 512-bit vector of floats */
typedef float vec16 __attribute__((vector_size(PANEL * sizeof(float))));

static inline vec16 load16(const float *p) { vec16 v; memcpy(&v, p, sizeof v); return v; }

/* How a matmul weight W (d, n) is kept in memory.
 *
 * W_F32 and W_BF16 are panels: ceil(d/16) panels, panel q holding output columns 16q..16q+15
 * as n rows of 16 elements, zero-padded past d. The kernel then reads each weight once per
 * step as whole contiguous vectors, with no horizontal sums. BF16 panels hold the file's
 * bfloat16 bits and widen them on load into the same float arithmetic: half the bytes, and
 * results identical to F32 panels of the same values.
 *
 * W_BF16P is the layout of BF16 on the avx512bf16 path, whose vdpbf16ps multiplies bfloat16
 * pairs: panel q holds ceil(n/2) steps of 16 columns x 2 inputs, element (q, j/2, c, j%2) =
 * W[16q + c][j], zero past n and past d. That path rounds each input row to bfloat16 (to
 * nearest even) once a matmul and sums the exact products of the rounded inputs in float, two a
 * step: a BF16 model computes what llama.cpp computes for it, not what F32 panels of the same
 * weights compute (within 2^-8 of each input; tests/test_kernel_paths.py states the bound).
 *
 * W_Q32 keeps a GGUF block type quantized: row o of W is n/32 blocks of 32 values,
 * value = scale * q + min with q unsigned and scale, min floats per block (unpack_block: the
 * file's own values, exactly). One form for every block type means one kernel (qtile).
 *
 * W_Q16 is W_Q32 with a scale and min per 16 values (two per block), for Q6_K, Q3_K and Q2_K,
 * whose scales change every 16 values (unpack_halves), alone or fused with other block types
 * (a Q4_K_M file's q, k in Q4_K beside v in Q6_K); its kernel is qtile16 (on x86, the byte tile
 * qtile_bytes8 with two scales a block).
 *
 * Either keeps its quants as nibbles when every part fits in 4 bits (Q4_0, Q4_1, Q4_K, Q3_K,
 * Q2_K), 16 bytes a block, byte j holding value j low and value j + 16 high; else a byte per
 * value (Q8_0, Q5_0, Q5_1, Q5_K, Q6_K, or a fused projection mixing those with 4-bit types). */
typedef enum { W_F32, W_BF16, W_BF16P, W_Q32, W_Q16 } wkind;

typedef struct {
    wkind kind;
    int n, d;        /* input and output width of W (d, n) */
    void *p;         /* panels: (n_panels, n, 16) floats or bf16, (n_panels, ceil(n/2), 16, 2) bf16 pairs,
                      * 64-byte aligned; blocks: (d, n/32) quants */
    float *scale;    /* blocks only: (d, n/32); W_Q16: (d, n/16) */
    float *min;      /* blocks only: (d, n/32); W_Q16: (d, n/16) */
    int narrow;      /* blocks: every quant is below 64 (no Q8_0 part), so one 16-bit product pass is exact */
    int nibbles;     /* blocks: quants two to a byte, 16 bytes a block (every part 4-bit or less) */
    int q8;          /* W_Q32 blocks, every part Q8_0: min = -128 x scale in every block */
} matrix;

/* A block kernel's inputs quantized per 32-value block (see quantize_rows in kernels.c), and a pair
 * kernel's rounded to bfloat16, in the engine's scratch, sized for `rows` rows of the widest input. */
typedef struct {
    int8_t *aq;      /* (rows, n): the quants; for a nibble W_Q32 on the x86 paths, in pairs of
                      * blocks (quantize_rows' paired order) */
    float *ad;       /* (rows rounded up to 4, n/32): each block's scale, rows in fours: (r/4, block, r%4) */
    float *as;       /* (rows, n/32): each block's scale * the sum of its quants */
    float *ai;       /* as, laid out as ad: (rows rounded up to 4, n/32), (r/4, block, r%4) */
    float *ah;       /* (rows, n/16): each half block's scale * the sum of its quants (W_Q16) */
    uint16_t *ab;    /* (rows, n rounded up to even): the rows rounded to bfloat16 (W_BF16P) */
} qinput;

/* out (rows, d) = x (rows, n) @ W^T, W in panels (W_F32, W_BF16, W_BF16P) or blocks (W_Q32, W_Q16), on up
 * to the engine's thread team (csrc/pool.h; NULL: the calling thread alone). */
struct pool;
typedef void (*panel_fn)(float *out, const float *x, const matrix *w, int rows, struct pool *team, const qinput *q);
typedef void (*block_fn)(float *out, const float *x, const matrix *w, int rows, struct pool *team, const qinput *q);

/* One kernel path: every path computes the same sums, up to float rounding order and FMA (and,
 * on avx512bf16, a BF16 matrix's inputs rounded to bfloat16: W_BF16P). */
typedef struct {
    const char *name;
    panel_fn panel_matmul;
    block_fn block_matmul;
} kernel_set;

#define KERNEL_SET_DECL(path) \
    void panel_matmul_##path(float *, const float *, const matrix *, int, struct pool *, const qinput *); \
    void block_matmul_##path(float *, const float *, const matrix *, int, struct pool *, const qinput *); \
    extern const int kernel_bf16_pairs_##path;  /* 1: this build's panel_matmul multiplies W_BF16P */
KERNEL_SET_DECL(portable)
#if defined(__x86_64__) || defined(__i386__)
KERNEL_SET_DECL(avx2)
KERNEL_SET_DECL(avxvnni)
KERNEL_SET_DECL(avx512vnni)
KERNEL_SET_DECL(avx512bf16)
#endif
#undef KERNEL_SET_DECL

#endif
