# cython: language_level=3, boundscheck=False, wraparound=False
"""Thin binding of csrc/engine.h: one class owning the C handle, long calls without the GIL,
and one function mapping status codes to Python exceptions. No logic lives here."""
import numpy as np

cimport numpy as cnp
from libc.stdint cimport uint64_t

from cengine cimport *

from colibri import engine_errors

cnp.import_array()

MAX_SLOTS = COLIBRI_MAX_SLOTS
MAX_TOP_K = COLIBRI_MAX_TOP_K
PREFILL_NO_REUSE = COLIBRI_PREFILL_NO_REUSE
PREFILL_ALL_LOGITS = COLIBRI_PREFILL_ALL_LOGITS
#: COLIBRI_SPIN_US: the engine's default and the largest value it reads (csrc/pool.h)
SPIN_US_DEFAULT = POOL_SPIN_US
SPIN_US_MAX = POOL_SPIN_MAX_US
#: kernel path name -> COLIBRI_KERNELS_* number, narrowest first ("best": no cap)
KERNEL_PATHS = {"best": COLIBRI_KERNELS_BEST, "portable": COLIBRI_KERNELS_PORTABLE, "avx2": COLIBRI_KERNELS_AVX2,
                "avxvnni": COLIBRI_KERNELS_AVXVNNI, "avx512vnni": COLIBRI_KERNELS_AVX512VNNI,
                "avx512bf16": COLIBRI_KERNELS_AVX512BF16}


def kernels_available():
    """The kernel path the engine runs uncapped, by name: the widest this CPU runs, but avx512bf16
    only on AMD, where its pairs were measured faster (csrc/engine.c, pairs_by_default)."""
    return colibri_kernels_name(colibri_kernels_available()).decode()


def kernels_runnable():
    """Every kernel path this CPU runs, by name, narrowest first (not always a prefix of the list:
    Zen 4 runs avx512vnni but not avxvnni)."""
    return [name for name, path in KERNEL_PATHS.items() if name != "best" and colibri_kernels_runs(path)]


def build_march():
    """The -march the engine outside its kernels was built for ("native" unless COLIBRI_MARCH)."""
    return colibri_build_march().decode()

_EXCEPTIONS = {
    COLIBRI_E_IO: engine_errors.WeightsIOError,
    COLIBRI_E_FORMAT: engine_errors.WeightsFormatError,
    COLIBRI_E_MISSING_TENSOR: engine_errors.WeightsFormatError,
    COLIBRI_E_SHAPE: engine_errors.ConfigMismatchError,
    COLIBRI_E_DTYPE: engine_errors.WeightsFormatError,
    COLIBRI_E_CONFIG: engine_errors.ConfigMismatchError,
    COLIBRI_E_NOMEM: MemoryError,
    COLIBRI_E_SLOT: engine_errors.SlotError,
    COLIBRI_E_CONTEXT: engine_errors.ContextOverflowError,
    COLIBRI_E_ARG: engine_errors.EngineArgumentError,
    COLIBRI_E_STATE: engine_errors.EngineStateError,
}


cdef int check(int status) except -1:
    if status >= 0:
        return 0
    exc = _EXCEPTIONS.get(status, engine_errors.EngineError)
    raise exc(f"{colibri_strerror(status).decode()} (status {status})")


cdef class Engine:
    cdef colibri_engine *e
    cdef readonly int vocab_size, n_ctx, n_slots

    def __cinit__(self, str path, *, int dim, int hidden_dim, int n_layers, int n_heads, int n_kv_heads,
                  int vocab_size, int n_ctx, bint tie_embeddings, float rope_theta, float norm_eps,
                  int n_slots=1, int n_threads=0, int head_dim=0, rope_inv_freq=None, bint dequantize=False,
                  int kernels=0):
        cdef colibri_config cfg
        cdef cnp.ndarray[float, ndim=1, mode="c"] inv_freq
        cfg.dim = dim
        cfg.hidden_dim = hidden_dim
        cfg.n_layers = n_layers
        cfg.n_heads = n_heads
        cfg.n_kv_heads = n_kv_heads
        cfg.vocab_size = vocab_size
        cfg.n_ctx = n_ctx
        cfg.tie_embeddings = tie_embeddings
        cfg.rope_theta = rope_theta
        cfg.norm_eps = norm_eps
        cfg.head_dim = head_dim
        cfg.rope_inv_freq = NULL
        cfg.dequantize = dequantize
        cfg.kernels = kernels
        if rope_inv_freq is not None:
            inv_freq = np.ascontiguousarray(rope_inv_freq, dtype=np.float32)
            if inv_freq.shape[0] != (head_dim or (dim // n_heads if n_heads else 0)) // 2:
                raise engine_errors.ConfigMismatchError("rope_inv_freq must hold head_dim/2 values")
            cfg.rope_inv_freq = &inv_freq[0]
        cdef bytes bpath = path.encode()
        cdef const char *cpath = bpath
        cdef int rc
        with nogil:
            rc = colibri_load(cpath, &cfg, n_slots, n_threads, &self.e)
        check(rc)
        self.vocab_size = vocab_size
        self.n_ctx = n_ctx
        self.n_slots = n_slots

    @property
    def n_threads(self):
        """Threads the engine computes with."""
        return colibri_threads(self.e)

    @property
    def kernels(self):
        """The kernel path it runs, by name (see KERNEL_PATHS)."""
        return colibri_kernels_name(colibri_kernels(self.e)).decode()

    def __dealloc__(self):
        if self.e is not NULL:
            colibri_free(self.e)
            self.e = NULL

    def prefill(self, int slot, tokens, *, bint reuse=True, bint all_logits=False):
        """Returns (n_reused, logits): logits of the last position (vocab,), or with
        all_logits of every computed position (n - n_reused, vocab)."""
        cdef cnp.ndarray[int, ndim=1, mode="c"] toks = np.ascontiguousarray(tokens, dtype=np.intc)
        cdef int n = toks.shape[0]
        if n <= 0:
            check(COLIBRI_E_ARG)
        cdef int flags = (0 if reuse else COLIBRI_PREFILL_NO_REUSE) | (COLIBRI_PREFILL_ALL_LOGITS if all_logits else 0)
        cdef cnp.ndarray[float, ndim=2, mode="c"] out = np.empty((n if all_logits else 1, self.vocab_size), np.float32)
        cdef int reused = 0, rc
        with nogil:
            rc = colibri_prefill(self.e, slot, &toks[0], n, flags, &reused, &out[0, 0])
        check(rc)
        if all_logits:
            return reused, out[: n - reused]
        return reused, out[0]

    def prefill_branches(self, int slot, branches):
        """Logits (len(branches), vocab) of each branch's last position, every branch a token
        list continuing the slot's history on its own; the slot's history is left unchanged."""
        cdef cnp.ndarray[int, ndim=1, mode="c"] lens = np.asarray([len(b) for b in branches], dtype=np.intc)
        cdef int nb = lens.shape[0]
        if nb <= 0 or lens.min() <= 0:
            check(COLIBRI_E_ARG)
        cdef cnp.ndarray[int, ndim=1, mode="c"] toks = np.ascontiguousarray(np.concatenate(
            [np.asarray(b, dtype=np.intc) for b in branches]), dtype=np.intc)
        cdef cnp.ndarray[float, ndim=2, mode="c"] out = np.empty((nb, self.vocab_size), np.float32)
        cdef int rc
        with nogil:
            rc = colibri_prefill_branches(self.e, slot, nb, &lens[0], &toks[0], &out[0, 0])
        check(rc)
        return out

    def decode(self, slots, tokens):
        """Advance each slot by its token; returns logits (len(slots), vocab)."""
        cdef cnp.ndarray[int, ndim=1, mode="c"] s = np.ascontiguousarray(slots, dtype=np.intc)
        cdef cnp.ndarray[int, ndim=1, mode="c"] t = np.ascontiguousarray(tokens, dtype=np.intc)
        cdef int n = s.shape[0]
        if n <= 0 or t.shape[0] != n:
            check(COLIBRI_E_ARG)
        cdef cnp.ndarray[float, ndim=2, mode="c"] out = np.empty((n, self.vocab_size), np.float32)
        cdef int rc
        with nogil:
            rc = colibri_decode(self.e, n, &s[0], &t[0], &out[0, 0])
        check(rc)
        return out

    def slot_len(self, int slot):
        cdef int rc = colibri_slot_len(self.e, slot)
        check(rc)
        return rc

    def slot_tokens(self, int slot):
        cdef cnp.ndarray[int, ndim=1, mode="c"] out = np.empty(max(self.n_ctx, 1), np.intc)
        cdef int rc = colibri_slot_tokens(self.e, slot, &out[0], self.n_ctx)
        check(rc)
        return out[:rc].tolist()

    def slot_truncate(self, int slot, int n):
        check(colibri_slot_truncate(self.e, slot, n))

    def slot_state(self, int slot):
        """The slot's history and K/V rows as bytes (see colibri_slot_save)."""
        cdef long size = colibri_slot_state_size(self.e, slot)
        check(<int>size if size < 0 else 0)
        cdef cnp.ndarray[cnp.uint8_t, ndim=1, mode="c"] buf = np.empty(max(size, 1), np.uint8)
        check(colibri_slot_save(self.e, slot, &buf[0], size))
        return buf[:size].tobytes()

    def load_slot_state(self, int slot, bytes data):
        cdef const unsigned char[:] view = data
        if len(data) == 0:
            check(COLIBRI_E_FORMAT)
        check(colibri_slot_load(self.e, slot, &view[0], len(data)))


def sample(logits, float temperature, float top_p, unsigned long long rng_state):
    """Returns (token, next_rng_state)."""
    cdef cnp.ndarray[float, ndim=1, mode="c"] row = np.ascontiguousarray(logits, dtype=np.float32)
    cdef uint64_t state = rng_state
    cdef int token = 0
    check(colibri_sample(&row[0], row.shape[0], temperature, top_p, &state, &token))
    return token, state


def sample_rows(float[:, ::1] logits, float[::1] temperatures, float[::1] top_ps, unsigned long long[::1] rng_states):
    """colibri_sample for each row of a decode step's logits in one call. Returns the tokens;
    each row's rng state is advanced in place."""
    cdef Py_ssize_t n = logits.shape[0], i
    if temperatures.shape[0] != n or top_ps.shape[0] != n or rng_states.shape[0] != n or n == 0:
        check(COLIBRI_E_ARG)
    cdef cnp.ndarray[int, ndim=1, mode="c"] out = np.empty(n, np.intc)
    cdef uint64_t state
    cdef int token = 0
    for i in range(n):
        state = rng_states[i]
        check(colibri_sample(&logits[i, 0], logits.shape[1], temperatures[i], top_ps[i], &state, &token))
        rng_states[i] = state
        out[i] = token
    return out


def logprobs(logits, int token, int k):
    """Returns (token_logprob, top_ids, top_logprobs) from the raw logits (before temperature)."""
    cdef cnp.ndarray[float, ndim=1, mode="c"] row = np.ascontiguousarray(logits, dtype=np.float32)
    cdef cnp.ndarray[int, ndim=1, mode="c"] ids = np.zeros(max(k, 1), np.intc)
    cdef cnp.ndarray[float, ndim=1, mode="c"] lps = np.zeros(max(k, 1), np.float32)
    cdef float lp = 0
    check(colibri_logprobs(&row[0], row.shape[0], token, k, &lp, &ids[0], &lps[0]))
    return float(lp), ids[:k].tolist(), lps[:k].tolist()
