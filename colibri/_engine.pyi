# Type stub of the Cython binding (pyx/engine.pyx).
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

MAX_SLOTS: int
MAX_TOP_K: int
PREFILL_NO_REUSE: int
PREFILL_ALL_LOGITS: int

class Engine:
    vocab_size: int
    n_ctx: int
    n_slots: int
    def __init__(self, path: str, *, dim: int, hidden_dim: int, n_layers: int, n_heads: int, n_kv_heads: int,
                 vocab_size: int, n_ctx: int, tie_embeddings: bool, rope_theta: float, norm_eps: float,
                 n_slots: int = 1, n_threads: int = 0) -> None: ...
    def prefill(self, slot: int, tokens: Sequence[int] | npt.NDArray[np.intc], *, reuse: bool = True,
                all_logits: bool = False) -> tuple[int, npt.NDArray[np.float32]]: ...
    def decode(self, slots: Sequence[int], tokens: Sequence[int]) -> npt.NDArray[np.float32]: ...
    def slot_len(self, slot: int) -> int: ...
    def slot_tokens(self, slot: int) -> list[int]: ...
    def slot_truncate(self, slot: int, n: int) -> None: ...

def sample(logits: npt.NDArray[np.float32], temperature: float, top_p: float, rng_state: int) -> tuple[int, int]: ...
def logprobs(logits: npt.NDArray[np.float32], token: int, k: int) -> tuple[float, list[int], list[float]]: ...
