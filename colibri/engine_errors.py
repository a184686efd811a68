"""Exceptions raised by the engine binding, one per family of C status codes."""


class EngineError(Exception):
    """Base class of every engine failure."""


class WeightsIOError(EngineError):
    """The weights file could not be opened, sized or mapped."""


class WeightsFormatError(EngineError):
    """The weights file is not a well-formed safetensors file with the tensors and dtypes needed."""


class ConfigMismatchError(EngineError):
    """config.json is inconsistent, or does not match the tensors' shapes."""


class SlotError(EngineError):
    """A KV slot index is out of range or repeated."""


class ContextOverflowError(EngineError):
    """The tokens do not fit in the context."""


class EngineArgumentError(EngineError, ValueError):
    """An argument is out of range (token id, k above 32, empty input)."""


class EngineStateError(EngineError):
    """A call came out of order (decode on an empty slot)."""
