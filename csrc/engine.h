/*
 * colibri engine: a Llama-architecture transformer in plain C (libc, libm, pthreads).
 *
 * Flat API over one opaque handle. Nothing is printed, nothing exits, no global state:
 * every function returns a status code from the list below (0 = success), and
 * colibri_strerror() names it. The caller owns all buffers it passes in.
 *
 * Model: RMSNorm, rotary position embedding in the rotate-half (Hugging Face) convention,
 * grouped-query attention, SwiGLU MLP, tied or untied output embedding. Weights come from
 * one safetensors or GGUF file. F32 and F16 matrices compute in F32; BF16 matrices stay
 * BF16 and widen to F32 in the kernel (identical results), except on a CPU with AVX-512 BF16,
 * where they multiply inputs rounded to bfloat16 (COLIBRI_KERNELS_AVX512BF16); GGUF block types (Q8_0, Q4_0,
 * Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) stay quantized and multiply integer dot products against
 * inputs quantized per 32-value block (see kernels.c: block kernels). Norms, attention and
 * logits are F32.
 *
 * KV slots: 1..16 independent sequences, each with its token history. A prefill compares
 * the prompt with the slot's history and computes only the new suffix (prefix reuse). A
 * decode call advances several slots by one token each in one pass over the weights.
 */
#ifndef COLIBRI_ENGINE_H
#define COLIBRI_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status codes (every function returns one of these) ---- */
#define COLIBRI_OK                 0   /* success */
#define COLIBRI_E_IO              -1   /* the weights file could not be opened, sized or mapped */
#define COLIBRI_E_FORMAT          -2   /* not a safetensors or GGUF file: a header, its metadata or data offsets malformed or truncated */
#define COLIBRI_E_MISSING_TENSOR  -3   /* a tensor the config requires is absent */
#define COLIBRI_E_SHAPE           -4   /* a tensor's shape does not match the config */
#define COLIBRI_E_DTYPE           -5   /* a tensor's dtype is none of those colibri_load lists */
#define COLIBRI_E_CONFIG          -6   /* the config is inconsistent (heads do not divide dim, zero sizes, ...) */
#define COLIBRI_E_NOMEM           -7   /* an allocation failed */
#define COLIBRI_E_SLOT            -8   /* slot index outside 0..n_slots-1, or a slot listed twice in one decode */
#define COLIBRI_E_CONTEXT         -9   /* the tokens would not fit in the context (n_ctx) */
#define COLIBRI_E_ARG            -10   /* an argument is out of range (token id, k > COLIBRI_MAX_TOP_K, n <= 0, NULL) */
#define COLIBRI_E_STATE          -11   /* the call is out of order (decode on an empty slot) */

#define COLIBRI_MAX_SLOTS 16
#define COLIBRI_MAX_TOP_K 32

/* Kernel paths, narrowest first: the instruction set the matmul kernels are compiled for. Each
 * computes the same sums (up to float rounding order), but avx512bf16 on BF16 matrices; see
 * colibri_config.kernels. */
#define COLIBRI_KERNELS_BEST        0  /* as a cap: none, the path colibri_kernels_available names */
#define COLIBRI_KERNELS_PORTABLE    1  /* plain C loops: any CPU (ARM runs these: no NEON kernels yet;
                                          * tested on aarch64 under QEMU only, tests/test_arm_portable.py) */
#define COLIBRI_KERNELS_AVX2        2  /* x86 AVX2 + FMA */
#define COLIBRI_KERNELS_AVXVNNI     3  /* AVX2 + FMA + AVX-VNNI (256-bit int8 dot products) */
#define COLIBRI_KERNELS_AVX512VNNI  4  /* AVX-512 F/BW/VL/DQ + VNNI */
#define COLIBRI_KERNELS_AVX512BF16  5  /* avx512vnni + AVX-512 BF16: BF16 matrices multiply inputs rounded
                                          * to bfloat16 (as llama.cpp's do), not exact floats */

/* prefill flags */
#define COLIBRI_PREFILL_NO_REUSE   1   /* recompute from position 0 even if the slot holds a matching prefix */
#define COLIBRI_PREFILL_ALL_LOGITS 2   /* write logits for every computed position, not only the last */

typedef struct {
    int dim;          /* model width */
    int hidden_dim;   /* MLP inner width */
    int n_layers;
    int n_heads;      /* query heads */
    int n_kv_heads;   /* key/value heads (n_heads must be a multiple) */
    int vocab_size;
    int n_ctx;        /* positions per slot */
    int tie_embeddings; /* 1: the output projection is the token embedding */
    float rope_theta;
    float norm_eps;
    int head_dim;     /* width of one attention head; 0: dim / n_heads */
    /* head_dim/2 RoPE inverse frequencies (a scaled RoPE, e.g. Llama 3's), read by
     * colibri_load only; NULL: rope_theta^(-2i/head_dim). */
    const float *rope_inv_freq;
    /* 0: GGUF block types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) stay quantized and
     * BF16 stays BF16;
     * 1: every tensor is expanded to F32 at load (the exact reference the quantized kernels
     * are measured against, at 2-8x the memory). */
    int dequantize;
    /* A cap on the kernel path (COLIBRI_KERNELS_*): the widest path the CPU runs that is not wider
     * than this one (so a path the CPU lacks gives a narrower one); COLIBRI_KERNELS_BEST (0): no cap,
     * colibri_kernels_available's path. To measure or test a narrower CPU's path on a wider one.
     * colibri_load returns COLIBRI_E_ARG for a value outside the list. */
    int kernels;
} colibri_config;

typedef struct colibri_engine colibri_engine;

/* Load weights and allocate n_slots KV slots (1..COLIBRI_MAX_SLOTS), computing with n_threads
 * threads (0: every core this process may use, its affinity mask), a team of the
 * engine's own (csrc/pool.h). The file is safetensors (F32, F16, BF16) or a llama GGUF
 * (version 2 or 3; F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K tensors,
 * kept as cfg->dequantize says); the config must match its tensors. On failure *out is NULL. */
int colibri_load(const char *weights_path, const colibri_config *cfg, int n_slots, int n_threads,
                 colibri_engine **out);
void colibri_free(colibri_engine *e);

/* Prefill `tokens[0..n)` into `slot`. The slot's history is compared with the tokens and the
 * longest common prefix (at most n-1) is reused unless COLIBRI_PREFILL_NO_REUSE; *n_reused
 * receives its length. Logits of the last position go to logits_out (vocab floats); with
 * COLIBRI_PREFILL_ALL_LOGITS, logits of every computed position n_reused..n-1, in order
 * ((n - n_reused) * vocab floats). logits_out may be NULL. */
int colibri_prefill(colibri_engine *e, int slot, const int *tokens, int n, int flags, int *n_reused,
                    float *logits_out);

/* Score n_branches continuations of a slot's history in one pass (System One's questions after
 * a shared state): branch b is lens[b] tokens, taken in order from `tokens`. Each branch sees
 * the slot's history and its own earlier tokens, never another branch's, so its last logits
 * equal those of prefilling history + branch alone. The logits of each branch's last position
 * go to logits_out (n_branches * vocab floats, in branch order). The slot's history is left as
 * it was. COLIBRI_E_CONTEXT when the history and all branches together exceed the context. */
int colibri_prefill_branches(colibri_engine *e, int slot, int n_branches, const int *lens, const int *tokens,
                             float *logits_out);

/* Append one token to each of n distinct slots and compute their next-token logits together
 * (logits_out: n * vocab floats, row i for slots[i]). Each slot gets exactly what it would
 * get decoded alone. */
int colibri_decode(colibri_engine *e, int n, const int *slots, const int *tokens, float *logits_out);

/* Tokens held by a slot; negative status on a bad slot. */
int colibri_slot_len(const colibri_engine *e, int slot);
/* Copy up to cap tokens of a slot's history into out; returns the count or a status. */
int colibri_slot_tokens(const colibri_engine *e, int slot, int *out, int cap);
/* Forget everything after the first n tokens of a slot (n <= length). */
int colibri_slot_truncate(colibri_engine *e, int slot, int n);

/* Slot state as bytes, for persistence: the token history and the K/V cache rows of every
 * held position. colibri_slot_state_size gives the bytes colibri_slot_save writes (or a
 * negative status); colibri_slot_load restores a slot from such bytes, refusing with
 * COLIBRI_E_FORMAT anything that does not fit this engine's shapes exactly. Integrity of
 * the bytes themselves (checksums, atomic files) is the caller's. */
long colibri_slot_state_size(const colibri_engine *e, int slot);
int colibri_slot_save(const colibri_engine *e, int slot, void *buf, size_t cap);
int colibri_slot_load(colibri_engine *e, int slot, const void *buf, size_t n);

const colibri_config *colibri_get_config(const colibri_engine *e);

/* Threads the engine computes with (n_threads of colibri_load, or the default it chose). */
int colibri_threads(const colibri_engine *e);
/* The kernel path the engine runs (COLIBRI_KERNELS_*, never BEST). */
int colibri_kernels(const colibri_engine *e);
/* The kernel path the engine runs uncapped: the widest this CPU runs, but avx512bf16 (which changes
 * a BF16 model's sums) only on AMD, where its pairs were measured faster (engine.c, pairs_by_default). */
int colibri_kernels_available(void);
/* 1 if this CPU runs kernel path `path`, else 0. The paths are not nested: a CPU may run a wider one
 * and not a narrower (AMD Zen 4 runs avx512vnni, not avxvnni). */
int colibri_kernels_runs(int path);
/* A kernel path's name ("portable", "avx2", "avxvnni", "avx512vnni", "avx512bf16"); NULL if this build has none
 * of that number (only "portable" off x86). */
const char *colibri_kernels_name(int path);
/* The -march the engine outside the matmul kernels was compiled for ("native" unless the build set
 * COLIBRI_MARCH, e.g. "x86-64-v3": any AVX2 CPU); each kernel path adds its own target on top. */
const char *colibri_build_march(void);

/* ---- sampling and log probabilities (pure functions over one logits row) ---- */

/* Pick a token: argmax when temperature <= 0; otherwise softmax(logits / temperature),
 * truncated to the smallest set whose mass reaches top_p, sampled with *rng (xorshift64*
 * state, advanced in place; must not be 0). */
int colibri_sample(const float *logits, int vocab, float temperature, float top_p, uint64_t *rng, int *token_out);

/* Log-softmax of the raw logits (before temperature: the model's own distribution). Writes
 * the chosen token's logprob and the k most likely tokens (descending) with theirs. */
int colibri_logprobs(const float *logits, int vocab, int token, int k, float *token_logprob, int *top_ids,
                     float *top_logprobs);

const char *colibri_strerror(int status);

#ifdef __cplusplus
}
#endif
#endif
