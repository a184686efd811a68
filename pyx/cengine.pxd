# Mirrors csrc/engine.h one to one.
from libc.stdint cimport uint64_t

cdef extern from "engine.h" nogil:
    int COLIBRI_OK
    int COLIBRI_E_IO
    int COLIBRI_E_FORMAT
    int COLIBRI_E_MISSING_TENSOR
    int COLIBRI_E_SHAPE
    int COLIBRI_E_DTYPE
    int COLIBRI_E_CONFIG
    int COLIBRI_E_NOMEM
    int COLIBRI_E_SLOT
    int COLIBRI_E_CONTEXT
    int COLIBRI_E_ARG
    int COLIBRI_E_STATE
    int COLIBRI_MAX_SLOTS
    int COLIBRI_MAX_TOP_K
    int COLIBRI_PREFILL_NO_REUSE
    int COLIBRI_PREFILL_ALL_LOGITS
    int COLIBRI_KERNELS_BEST
    int COLIBRI_KERNELS_PORTABLE
    int COLIBRI_KERNELS_AVX2
    int COLIBRI_KERNELS_AVXVNNI
    int COLIBRI_KERNELS_AVX512VNNI
    int COLIBRI_KERNELS_AVX512BF16

    ctypedef struct colibri_config:
        int dim
        int hidden_dim
        int n_layers
        int n_heads
        int n_kv_heads
        int vocab_size
        int n_ctx
        int tie_embeddings
        float rope_theta
        float norm_eps
        int head_dim
        const float *rope_inv_freq
        int dequantize
        int kernels

    ctypedef struct colibri_engine:
        pass

    int colibri_load(const char *safetensors_path, const colibri_config *cfg, int n_slots, int n_threads,
                     colibri_engine **out)
    void colibri_free(colibri_engine *e)
    int colibri_prefill(colibri_engine *e, int slot, const int *tokens, int n, int flags, int *n_reused,
                        float *logits_out)
    int colibri_prefill_branches(colibri_engine *e, int slot, int n_branches, const int *lens, const int *tokens,
                                 float *logits_out)
    int colibri_decode(colibri_engine *e, int n, const int *slots, const int *tokens, float *logits_out)
    int colibri_slot_len(const colibri_engine *e, int slot)
    int colibri_slot_tokens(const colibri_engine *e, int slot, int *out, int cap)
    int colibri_slot_truncate(colibri_engine *e, int slot, int n)
    long colibri_slot_state_size(const colibri_engine *e, int slot)
    int colibri_slot_save(const colibri_engine *e, int slot, void *buf, size_t cap)
    int colibri_slot_load(colibri_engine *e, int slot, const void *buf, size_t n)
    const colibri_config *colibri_get_config(const colibri_engine *e)
    int colibri_threads(const colibri_engine *e)
    int colibri_kernels(const colibri_engine *e)
    int colibri_kernels_available()
    int colibri_kernels_runs(int path)
    const char *colibri_kernels_name(int path)
    const char *colibri_build_march()
    int colibri_sample(const float *logits, int vocab, float temperature, float top_p, uint64_t *rng,
                       int *token_out)
    int colibri_logprobs(const float *logits, int vocab, int token, int k, float *token_logprob, int *top_ids,
                         float *top_logprobs)
    const char *colibri_strerror(int status)


cdef extern from "pool.h" nogil:
    int POOL_SPIN_US
    int POOL_SPIN_MAX_US
