"""`colibri serve`: the reference server under gunicorn (gthread, one worker: the model lives in
one process; gunicorn_app.py). Its flags, their COLI_* environment variables, defaults, help
and checks are the settings table (settings.py); this module turns them into argparse
options and back into Settings, and refuses what must not start."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from .exit_codes import EXIT_OK, EXIT_USAGE
from .paths import EMBEDDED_FAMILY, EMBEDDED_MODEL_ID
from .settings import SETTINGS, SPARE_THREADS, Settings

LOOPBACK_BINDS = {"127.0.0.1", "localhost", "::1"}


class DefaultsHelp(argparse.HelpFormatter):
    """Every option's help ends with its default (the COLI_* variable's value when it is set),
    unless the text already says what the default is; on/off flags are off unless said."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "(default" in text or action.default in (None, argparse.SUPPRESS) or not action.option_strings:
            return text
        shown = "off" if action.default is False else "on" if action.default is True else action.default
        return f"{text} (default: {shown})"


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    p = argparse.ArgumentParser(prog="colibri serve", formatter_class=DefaultsHelp,
                                description="Serve the OpenAI- and Anthropic-compatible API "
                                "on the embedded model (or --model DIR). Every flag has a COLI_* env variable.")
    p.add_argument("--version", action="version", version=f"colibri {__version__}")
    for s in SETTINGS:
        if s.flag is None or s.env is None:  # every flag has its variable; a variable alone is no flag
            continue
        if s.switch is not None:
            p.add_argument(s.flag, action="store_true", default=os.environ.get(s.env) == s.switch, help=s.help_text())
        elif s.many:  # the environment variable is read by settings_from, when the flag is not given
            p.add_argument(s.flag, action="append", default=None, help=s.help_text())
        elif s.choices is not None:
            p.add_argument(s.flag, default=os.environ.get(s.env, s.default), choices=s.choices, help=s.help_text())
        else:
            p.add_argument(s.flag, type=s.type, default=os.environ.get(s.env, None if s.from_model else s.default),
                           help=s.help_text())
    return p


def settings_from(args: argparse.Namespace) -> Settings:
    """The Settings the parsed flags (and, for the variables argparse does not read, the
    environment) give."""
    values: dict[str, Any] = {}
    for s in SETTINGS:
        if s.flag is None:
            value = s.from_env()
            value = s.default if value is None else value
        else:
            value = getattr(args, s.dest)
            if s.switch is not None:
                value = (not s.default) if value else s.default
            elif s.many:
                value = value or s.from_env() or list(s.default)
            elif value in (None, "") and (s.from_model or s.default is None):
                value = s.default
            elif value is not None:
                value = s.type(value)
        values[s.name] = value
    return Settings(**values)


def http_threads(args: argparse.Namespace) -> int:
    """Every generating and every queued request holds a thread, so the pool is sized from the
    slots and the queue: a request then waits only in the admission queue (rule
    ops.admission.bounded)."""
    if args.threads is not None:
        return int(args.threads)
    return int(args.kv_slots) + int(args.max_queue) + SPARE_THREADS


def resolve_model_defaults(args: argparse.Namespace, model: Any, spec: Any = None) -> str:
    """Fill --model-id and --family when not given; returns how the family was chosen."""
    if args.model_id is None:
        from .paths import NAMED_MODELS

        named = args.model in NAMED_MODELS and not os.path.exists(args.model)
        args.model_id = args.model if named else model.name if args.model else EMBEDDED_MODEL_ID
    if args.family is not None:
        return "from --family"
    if not args.model:
        args.family = EMBEDDED_FAMILY
        return "the embedded model's default"
    from .families import detect_family
    from .spec import load_spec

    args.family, why = detect_family(model.own_template(), spec or load_spec())
    return f"detected: {why}; override with --family"


def check_args(args: argparse.Namespace) -> str | None:
    """A message for settings that must not start a server, or None."""
    if args.host not in LOOPBACK_BINDS and not args.api_key and not args.allow_insecure_bind:
        return (f"refusing to bind {args.host} without an API key: anyone on the network could use the model. "
                "Set --api-key (COLI_API_KEY), or pass --allow-insecure-bind if you mean it.")
    return next((p for s in SETTINGS if s.flag and (p := s.problem(getattr(args, s.dest)))), None)


def prepare(args: argparse.Namespace) -> tuple[Any, Any, str]:
    """The model, the spec and how the family was chosen, or UsageError: everything that can
    refuse to start is found here, in the parent, before gunicorn runs."""
    from .serve_checks import UsageError, open_model, port_problem, template_problem
    from .spec import load_spec

    # a busy port is found before the model loads, not after gunicorn's five one-second retries
    problem = check_args(args) or port_problem(args.host, int(args.port))
    if problem:
        raise UsageError(problem)
    model = open_model(args.model, args.ctx)  # fail early, in the parent, on a bad model
    spec = load_spec()  # read once: family detection, the --family check and the service all use it
    family_note = resolve_model_defaults(args, model, spec)
    families = spec.families
    if args.family not in families:
        raise UsageError(f"unknown --family {args.family!r}; known: {', '.join(families)}")
    problem = template_problem(model, families[args.family].row.get("template"))
    if problem:
        raise UsageError(problem)
    return model, spec, family_note


def main(argv: list[str] | None = None) -> int:
    from .serve_checks import UsageError

    args = build_parser().parse_args(argv)
    try:
        model, spec, family_note = prepare(args)
    except UsageError as e:
        print(f"colibri serve: {e}", file=sys.stderr)
        return EXIT_USAGE
    from .gunicorn_app import ServeApplication

    ServeApplication(settings_from(args), http_threads(args), model, spec, family_note).run()
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
