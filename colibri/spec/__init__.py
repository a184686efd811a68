"""The spec toolchain: load, compile, validate, lint, document and diff spec/."""
from .checks import Context, Failure, SpecError
from .loader import Problem, Spec, SpecLoadError, load_spec
from .model import Rule, Vector
from .validator import RequestValidator

__all__ = ["Context", "Failure", "Problem", "RequestValidator", "Rule", "Spec", "SpecError", "SpecLoadError",
           "Vector", "load_spec"]
