"""colibri-conform load: conformance under load, on Locust.

    colibri-conform load --base-url URL --users 64 --duration 120 [--batch-invariant] [--json F --html DIR]
    colibri-conform load --base-url URL --users 64 --duration 120 --master --expect-workers 2   # one machine
    colibri-conform load --worker --master-host HOST                                          # each other one

Before the load, discovery finds what the target serves and every behaviour-neutral vector of
the selected rules is sent alone once: the ones that pass alone make the plan, and their
answers are what the same requests must get under load. Then N Locust users send the plan for
S seconds (spawned at --spawn-rate a second), each answer judged as a normal run judges it.
Once the load stops and the server is idle again, /metrics is read, one request is sent alone,
and each greedy answer that differed from alone is weighed against the request sent alone
again with log probabilities. One report (the same JSON, Markdown and HTML as a normal run's,
plus a `load` block of figures and a timeline) holds the verdicts of every process.

Distributed: the master does discovery, the alone phase and the folding; workers (started with
--worker, on this machine or others, with the same colibri version) get the plan from the
master and send their records back. A worker takes its own --api-key / --header.

Exit codes: 0 no MUST rule failed; 1 failures; 2 usage error; 3 target unreachable or no plan.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import gevent  # noqa: F401 - Locust patches the process before anything opens a socket
import locust  # noqa: F401

from colibri.exit_codes import EXIT_OK, EXIT_UNTESTED, EXIT_USAGE

from .state import Shared
from .user import environment, run_local, run_master, run_worker


def parser() -> argparse.ArgumentParser:
    from ..suite import PROFILES_ALL

    p = argparse.ArgumentParser(prog="colibri-conform load", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--base-url", help="target server (…/v1 or the root); required except with --worker")
    p.add_argument("--api-key", help="key sent as Bearer and x-api-key (default: $COLI_CONFORM_API_KEY)")
    p.add_argument("--model", help="model id (default: the target's first listed model)")
    p.add_argument("--header", action="append", default=[], metavar="'K: V'", help="extra request header (repeatable)")
    p.add_argument("--profile", action="append", choices=PROFILES_ALL,
                   help="rule profiles whose vectors make the plan (default: the official contracts)")
    p.add_argument("--include-should", dest="should", action="store_true", help="SHOULD rules' vectors too")
    p.add_argument("--rule", action="append", default=[], metavar="PREFIX", help="only vectors of rules with this prefix")
    p.add_argument("--users", type=int, default=16, help="Locust users (concurrent clients; default 16)")
    p.add_argument("--duration", type=float, default=60.0, help="seconds of load (default 60)")
    p.add_argument("--spawn-rate", type=float, default=None, help="users started per second (default: all in one second)")
    p.add_argument("--deadline", type=float, default=60.0,
                   help="seconds within which every request must be answered or refused (default 60)")
    p.add_argument("--batch-invariant", action="store_true",
                   help="the target promises greedy answers independent of batching (colibri serve does): "
                        "judge rule load.greedy.bit-identical")
    p.add_argument("--disconnect-every", type=int, default=10, metavar="K",
                   help="every Kth request is a long stream its client leaves after the first bytes (0: none)")
    p.add_argument("--master", action="store_true", help="run as a Locust master: workers send the load")
    p.add_argument("--expect-workers", type=int, default=1, help="workers the master waits for (default 1)")
    p.add_argument("--master-bind-host", default="127.0.0.1", help="where the master listens (default 127.0.0.1)")
    p.add_argument("--master-bind-port", type=int, default=5557, help="(default 5557)")
    p.add_argument("--worker", action="store_true", help="run as a Locust worker of a master")
    p.add_argument("--master-host", default="127.0.0.1", help="the master a worker connects to")
    p.add_argument("--master-port", type=int, default=5557)
    p.add_argument("--json", dest="json_out", help="write the JSON report here")
    p.add_argument("--markdown", help="write a Markdown summary here")
    p.add_argument("--html", help="write the HTML report (with the load's plots) into this folder")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    return p


def main(argv: list[str]) -> int:
    import logging

    from ..targets import request_headers

    args = parser().parse_args(argv)
    logging.getLogger("locust").setLevel(logging.WARNING if args.quiet else logging.INFO)
    if args.users < 1 or args.duration <= 0:
        print("colibri-conform load: --users and --duration must be positive", file=sys.stderr)
        return EXIT_USAGE
    headers = request_headers(args)
    if args.worker:
        return worker(args, headers)
    if not args.base_url:
        print("colibri-conform load: --base-url is required (a load needs a server at a URL)", file=sys.stderr)
        return EXIT_USAGE
    from .session import Session

    say = (lambda m: None) if args.quiet else (lambda m: print(m, file=sys.stderr, flush=True))
    try:
        session = Session.open(args, headers, say)
    except SystemExit as e:
        return int(e.code or EXIT_USAGE)
    if not session.plan.items:
        print("colibri-conform load: no vector passed alone, so nothing to load with", file=sys.stderr)
        return EXIT_UNTESTED
    sh = session.shared(headers)
    env = environment(session.target.base)
    spawn = args.spawn_rate or float(args.users)
    say(f"load: {args.users} users for {args.duration:g} s, {len(session.plan.items)} requests in the plan"
        + (f", {args.expect_workers} workers" if args.master else ""))
    session.t0 = time.time()
    if args.master:
        seconds = run_master(env, session.plan_message(), session.records, args.users, spawn, args.duration,
                             args.expect_workers, (args.master_bind_host, args.master_bind_port), args.deadline, say)
    else:
        seconds = run_local(env, sh, args.users, spawn, args.duration)
        session.records.extend(sh.drain())
    return session.finish(env.stats, seconds)


def worker(args: argparse.Namespace, headers: dict[str, str]) -> int:
    from colibri.spec import load_spec

    from ..suite import Selection
    from .judge import Judge
    from .plan import from_keys, spec_digest

    spec = load_spec()
    env = environment("")

    def make_shared(msg: dict[str, Any]) -> Shared:
        if msg["digest"] != spec_digest(spec):
            print("colibri-conform load --worker: this worker's spec/ differs from the master's (another colibri "
                  "version?); its plan may judge otherwise", file=sys.stderr)
        sel = Selection(profiles=msg["profiles"], remote=True)
        judge = Judge(spec, sel.strict_contract, msg["profiles"], msg["deadline"], redact=_key(headers))
        return Shared(from_keys(spec, msg["keys"], msg["model"]), judge, msg["base_url"], headers, msg["model"],
                      msg["deadline"], msg["disconnect_every"])

    print(f"colibri-conform load --worker: connecting to {args.master_host}:{args.master_port}", file=sys.stderr)
    run_worker(env, (args.master_host, args.master_port), make_shared)
    return EXIT_OK


def _key(headers: dict[str, str]) -> str | None:
    return next((v.removeprefix("Bearer ").strip() for k, v in headers.items() if k.lower() == "authorization"), None)
