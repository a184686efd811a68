"""colibri: a spec-driven conformance framework and reference server for OpenAI- and
Anthropic-compatible LLM HTTP APIs."""

__version__ = "0.1.0"
