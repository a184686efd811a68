"""One load run seen from the process that reports it (a local run, or the master): what
happens before the load (first contact, discovery, the plan and its alone phase, /metrics),
and after it (waiting for the server to go idle, the request alone, references for greedy
divergences, folding and the report)."""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from colibri.exit_codes import EXIT_FAIL, EXIT_OK
from colibri.spec import load_spec
from colibri.spec.metrics import read_metrics

from ..differential import UNANSWERED
from ..discovery import Capabilities
from ..exchange import TransportError
from ..report import markdown, now_iso, to_json, write_html
from ..runner import prepare
from ..suite import REMOTE_DEFAULT, Selection
from ..targets import remote_target
from .figures import locust_stats, per_endpoint, timeline
from .fold import Idle, Settings, fold_load
from .judge import Judge
from .plan import Plan, build, spec_digest

#: How long the server may take to show nothing active or queued once the load stopped.
IDLE_TIMEOUT = 30.0
#: The scheduler's series' prefix on /metrics (spec/metrics.yaml).
PREFIX = read_metrics().prefix


def scheduler_samples(target: Any) -> dict[str, float] | None:
    """The colibri_scheduler_* gauges and counters on /metrics, or None where /metrics shows none."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        ex = target.send("GET", "/metrics", None, {})
        if ex.status != 200:
            return None
        fams = list(text_string_to_metric_families(ex.body.decode("utf-8")))
    except (TransportError, ValueError, UnicodeDecodeError):
        return None
    out = {s.name: float(s.value) for f in fams if f.name.startswith(PREFIX) for s in f.samples if not s.labels}
    return out or None


@dataclass
class Session:
    args: argparse.Namespace
    spec: Any
    sel: Selection
    target: Any
    caps: Any
    plan: Plan
    say: Any
    alone: dict[str, dict[str, Any]] = field(default_factory=dict)
    records: list[dict[str, Any]] = field(default_factory=list)
    before: dict[str, float] | None = None
    started: str = ""
    t0: float = 0.0
    clock: float = 0.0

    @classmethod
    def open(cls, args: argparse.Namespace, headers: dict[str, str], say: Any) -> Session:
        clock = time.monotonic()
        spec = load_spec()
        sel = Selection(profiles=args.profile or list(REMOTE_DEFAULT), strict=args.should, prefixes=args.rule,
                        remote=True, api_key=bool(_key(headers)))
        target = remote_target(args.base_url, headers, args.model, args.deadline)
        caps = Capabilities.discover(spec, target)
        say(f"target {args.base_url}, model {target.model}: {caps.summary()}")
        plan = build(spec, sel, target.model, caps.gate)
        s = cls(args, spec, sel, target, caps, plan, say, started=now_iso(), clock=clock)
        s.alone_phase()
        s.before = scheduler_samples(target)
        return s

    def judge(self) -> Judge:
        return Judge(self.spec, self.sel.strict_contract, self.sel.profiles, self.args.deadline,
                     redact=getattr(self.target, "api_key", None))

    def alone_phase(self) -> None:
        """Each candidate once, alone: those that pass make the plan, and their answers are the
        reference of the same request under load."""
        judge, kept = self.judge(), []
        for item in self.plan.items:
            rec = judge.send(item, self.target)
            if rec.status != 200 or rec.lost or rec.failures:
                why = rec.lost or (f"{rec.failures[0][0]}: {rec.failures[0][1]}" if rec.failures else str(rec.status))
                self.plan.excluded[item.key] = f"fails alone ({why}): the normal run's finding, not the load's"
                continue
            kept.append(item)
            self.alone[item.key] = {"answer": rec.answer, "ending": rec.ending}
        self.say(f"alone: {len(kept)} of {len(self.plan.items)} candidate requests pass and make the plan")
        self.plan.items = kept

    def shared(self, headers: dict[str, str]) -> Any:
        from .state import Shared

        return Shared(self.plan, self.judge(), self.args.base_url, headers, self.target.model, self.args.deadline,
                      self.args.disconnect_every)

    def plan_message(self) -> dict[str, Any]:
        return {"keys": self.plan.keys(), "base_url": self.args.base_url, "model": self.target.model,
                "deadline": self.args.deadline, "profiles": self.sel.profiles,
                "disconnect_every": self.args.disconnect_every, "digest": spec_digest(self.spec)}

    def idle(self) -> Idle:
        t = time.monotonic()
        after = scheduler_samples(self.target)
        while after and (after.get(PREFIX + "active") or after.get(PREFIX + "queued")) \
                and time.monotonic() - t < IDLE_TIMEOUT:
            time.sleep(0.2)
            after = scheduler_samples(self.target)
        out = Idle(before=self.before, after=after if self.before else None, idle_seconds=time.monotonic() - t)
        ep = self.spec.endpoints["chat"]
        body = json.dumps(dict(ep.minimal_request, model=self.target.model)).encode()
        try:
            ex = self.target.send("POST", ep.path, body, {})
            out.probe_status, out.probe_detail = ex.status, ex.text(200) if ex.status != 200 else ""
        except TransportError as e:
            out.probe_detail = str(e)
        return out

    def reference_for(self) -> Any:
        """key -> the request alone again with log probabilities (a differential Reference), or None."""
        from ..differential import reference_answer

        cache: dict[str, Any] = {}
        items = {i.key: i for i in self.plan.items}

        def ref(key: str) -> Any:
            if key not in cache:
                cache[key] = None
                item = items.get(key)
                body = prepare(self.spec, item.vector, self.target.model).body if item else None
                if item and body and item.vector.endpoint in ("chat", "completions") and self._logprobs():
                    prompt = {"endpoint": item.vector.endpoint, "messages": body.get("messages"),
                              "prompt": body.get("prompt"), "tools": body.get("tools")}
                    n = body.get("max_tokens") or body.get("max_completion_tokens") or 16
                    try:
                        cache[key] = reference_answer(self.target, prompt, self.target.model, int(n))
                    except (*UNANSWERED, KeyError, TypeError):  # no answer, or malformed logprobs: unweighed
                        cache[key] = None
            return cache[key]
        return ref

    def _logprobs(self) -> bool:
        f = self.caps.findings.get("logprobs")
        return f is not None and f.state == "served"

    def finish(self, stats: Any, seconds: float) -> int:
        idle = self.idle()
        items = {i.key: i for i in self.plan.items}
        settings = Settings(self.args.batch_invariant, self.args.users, self.args.deadline)
        results, divergence = fold_load(self.spec, self.records, items, self.alone, settings, idle, self.reference_for())
        key = getattr(self.target, "api_key", None)
        doc = to_json(results, {"target": self.args.base_url, "model": self.target.model, "started": self.started,
                                "duration_seconds": time.monotonic() - self.clock,
                                "contract": "strict" if self.sel.strict_contract else "official",
                                "selection": {"profiles": self.sel.profiles + ["load"], "strict": self.sel.strict,
                                              "include_should": self.sel.strict, "rules": self.sel.prefixes},
                                "discovery": self.caps.to_dict(key)}, redact=key)
        doc["load"] = self.load_block(stats, seconds, idle, divergence)
        return self.write(doc)

    def load_block(self, stats: Any, seconds: float, idle: Idle, divergence: dict[str, Any]) -> dict[str, Any]:
        a = self.args
        sent = {r["key"] for r in self.records}
        return {"users": a.users, "duration_seconds": a.duration, "ran_seconds": round(seconds, 3),
                "spawn_rate": a.spawn_rate or float(a.users), "deadline_seconds": a.deadline,
                "workers": a.expect_workers if a.master else 0, "batch_invariant": a.batch_invariant,
                "requests": len(self.records), "disconnects": sum(1 for r in self.records if r["disconnected"]),
                "plan": {"requests": len(self.plan.items), "sent": len(sent & set(self.plan.keys())),
                         "excluded": len(self.plan.excluded)},
                "endpoints": per_endpoint(locust_stats(stats), self.records, seconds),
                "timeline": timeline(self.records, self.t0), "greedy": divergence, "idle": idle.to_dict()}

    def write(self, doc: dict[str, Any]) -> int:
        a = self.args
        writers = [(a.json_out, lambda p: Path(p).write_text(json.dumps(doc, indent=2, ensure_ascii=False))),
                   (a.markdown, lambda p: Path(p).write_text(markdown(doc))), (a.html, lambda p: write_html(doc, Path(p)))]
        for dest, write in writers:
            if dest:
                write(dest)
        s, load = doc["summary"], doc["load"]
        print(" ".join(f"{k}={v}" for k, v in s.items()) + f"  ({load['requests']} requests, {a.users} users, "
              f"{load['ran_seconds']:.1f} s of load)")
        for r in doc["rules"]:
            if r["outcome"] in ("FAIL", "ERROR", "NON-STRICT"):
                bad: dict[str, Any] = next((v for v in r["vectors"] if v["outcome"] == r["outcome"]), {})
                print(f"{r['outcome']} {r['id']} [{bad.get('name', '')}] {bad.get('check', '')}: expected "
                      f"{bad.get('expected', '')} actual {bad.get('actual', bad.get('reason', ''))}"[:400])
        return EXIT_FAIL if s["FAIL"] or s["ERROR"] else EXIT_OK


def _key(headers: dict[str, str]) -> str | None:
    return next((v.removeprefix("Bearer ").strip() for k, v in headers.items() if k.lower() == "authorization"), None)
