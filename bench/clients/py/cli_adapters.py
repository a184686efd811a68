"""Command-line clients, driven by subprocess with the same adapter interface as adapters.py:
the `llm` CLI and the coding CLI aider. Each runs in a temp dir of its own (its config, its
history), configured from the derived settings only, with every host but the local server
refused (CLI_ENV), so a CLI that phones home fails fast instead of reaching the network."""
from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from adapters import _usage, thinking_off

CLI_ENV = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
           "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9",
           "http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9"}
#: The clients' cache (install.py): the driver runs in CACHE/venv, aider has CACHE/aider.
CACHE = Path(sys.executable).parents[2]


def run(argv: list[str], env: dict[str, str], cwd: str) -> subprocess.CompletedProcess[str]:
    p = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **CLI_ENV, **env}, cwd=cwd,
                       timeout=300, stdin=subprocess.DEVNULL)
    if p.returncode != 0:
        raise RuntimeError(f"{Path(argv[0]).name} exited {p.returncode}: {(p.stderr or p.stdout).strip()[-400:]}")
    return p


def user(text: str) -> Any:
    return {"role": "user", "content": text}


def assistant(text: str) -> Any:
    return {"role": "assistant", "content": text}


class LlmCli:
    """Simon Willison's `llm` CLI: the server is an entry of its own extra-openai-models.yaml in
    a private LLM_USER_PATH, as its docs configure an OpenAI-compatible server. A history is
    replayed the CLI's way: each earlier user turn is prompted (and logged), the last one
    continues that conversation (`-c`); the CLI cannot be handed an assistant message, so the
    model's own earlier answers stand in for the script's. It runs the tool loop itself
    (`--functions`)."""

    user, assistant = staticmethod(user), staticmethod(assistant)

    def __init__(self, base: str, model: str, settings: dict[str, Any], S: dict[str, Any]):
        import yaml

        self.home = tempfile.mkdtemp(prefix="colibri-llm-")
        atexit.register(shutil.rmtree, self.home, True)
        entry = {"model_id": "bench", "model_name": model, "api_base": base + "/v1", "supports_tools": True}
        if settings["served"].get("streaming") is False:
            entry["can_stream"] = False
        with open(f"{self.home}/extra-openai-models.yaml", "w") as f:
            yaml.safe_dump([entry], f)
        self.S = S
        # llm reads no reasoning text from Chat Completions (no reasoning_content in
        # llm/default_plugins/openai_models.py): nothing to check.
        self.can = {"stop": True, "reasoning": False}
        self.limits = {"extra_body": (
            "llm 0.36 sends no body field of its own choosing: its extra-openai-models.yaml entry is read for "
            "a fixed set of keys (llm/default_plugins/openai_models.py, register_models: api_base, headers, "
            "can_stream, supports_tools, ...), a request carries only the prompt's options (build_kwargs), "
            "and the options refuse any other name (llm/models.py, Options: extra=\"forbid\")")}

    def _llm(self, *args: str, stream: bool = False) -> tuple[str, dict[str, int] | None]:
        argv = [str(Path(sys.executable).parent / "llm"), "prompt", "-m", "bench", "-u",
                *([] if stream else ["--no-stream"]), *args]
        p = run(argv, {"LLM_USER_PATH": self.home}, self.home)
        counts = [tuple(int(n.replace(",", "")) for n in m)
                  for m in re.findall(r"Token usage: ([\d,]+) input, ([\d,]+) output", p.stderr)]
        return p.stdout.rstrip("\n"), (_usage(*counts[-1]) if counts else None)

    def turn(self, h: list[Any], max_tokens: int, tools: bool = False, stream: bool = False,
             stop: list[str] | None = None, reasoning: bool | None = None) -> dict[str, Any]:
        opts = ["-o", "temperature", "0", "-o", "max_tokens", str(max_tokens)]
        if stop:
            opts += ["-o", "stop", stop[0]]
        earlier = [e["content"] for e in h[:-1] if e["role"] == "user"]
        for i, q in enumerate(earlier):
            self._llm(*opts, *(["-c"] if i else []), q)
        text, usage = self._llm(*opts, *(["-c"] if earlier else []), h[-1]["content"], stream=stream)
        return {"text": text, "reasoning": "", "calls": [], "history": [], "usage": usage}

    def tool_loop(self, stream: bool) -> str:
        t = self.S["tool"]
        seen = Path(self.home) / "calls"
        seen.unlink(missing_ok=True)
        code = (f"def {t['name']}(city: str) -> str:\n    {t['description']!r}\n"
                f"    open({str(seen)!r}, 'a').write(city + '\\n')\n    return {t['result']!r}\n")
        out, _ = self._llm("-o", "temperature", "0", "-o", "max_tokens", str(t["max_tokens"]),
                           "--functions", code, t["prompt"], stream=stream)
        calls = seen.read_text().splitlines() if seen.exists() else []
        if not calls:
            raise AssertionError(f"the tool was not called; output {out!r}")
        if not out.strip():
            raise AssertionError("empty final answer")
        return f"{t['name']}({json.dumps(calls[0])}) -> {out[:60]!r}"


class Aider:
    """The coding CLI aider, one `--message` per turn, in ask mode (`--chat-mode ask`: answer,
    edit no file; its whole-file edit prompt is 1.2k tokens of instructions the embedded model
    was not trained on) with no git and no repo map, pointed at the server by
    `--openai-api-base` and `--model openai/MODEL`. At start it fetches LiteLLM's price list
    from the network twice (LiteLLM's own at import, aider's model-metadata cache when empty or
    stale): LITELLM_LOCAL_MODEL_COST_MAP and a fresh cache holding the served model stop both
    (`strace -e connect` then shows connections to the server only). A history is
    aider's own: `--restore-chat-history` resends the earlier turns (the model's answers, as for
    `llm`). The answer is read from its chat history file."""

    user, assistant = staticmethod(user), staticmethod(assistant)

    def __init__(self, base: str, model: str, settings: dict[str, Any], S: dict[str, Any]):
        self.base, self.model, self.S, self.off = base, model, S, thinking_off(settings)
        self.can = {"stop": False, "reasoning": False}
        self.limits = {"usage": "aider shows token counts it computes itself when the server sends no usage "
                                "(aider/coders/base_coder.py, calculate_and_show_tokens_and_cost): its display "
                                "cannot show whether the server reported usage",
                       "tools": "aider edits files through text edit formats: it offers the model no tools"}

    def _aider(self, cwd: str, prompt: str, stream: bool, restore: bool = False) -> str:
        caches = Path(cwd) / ".aider" / "caches"
        caches.mkdir(parents=True, exist_ok=True)
        (caches / "model_prices_and_context_window.json").write_text(  # an empty one counts as stale
            json.dumps({f"openai/{self.model}": {"litellm_provider": "openai", "mode": "chat"}}))
        argv = [str(CACHE / "aider" / "bin" / "aider"), "--message", prompt, "--no-git", "--yes-always",
                "--openai-api-base", self.base + "/v1", "--openai-api-key", "local", "--model", f"openai/{self.model}",
                "--chat-mode", "ask", "--map-tokens", "0", "--no-check-update", "--analytics-disable",
                "--no-show-release-notes", "--no-show-model-warnings", "--no-pretty", "--no-fancy-input",
                "--stream" if stream else "--no-stream", *(["--restore-chat-history"] if restore else [])]
        if self.off:  # aider's settings for every model (aider/models.py): litellm sends extra_body as is
            (Path(cwd) / "settings.yml").write_text(json.dumps(  # JSON is YAML
                [{"name": "aider/extra_params", "extra_params": {"extra_body": self.off}}]))
            argv += ["--model-settings-file", str(Path(cwd) / "settings.yml")]
        run(argv, {"HOME": cwd, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}, cwd)
        # The last answer in its chat history: the lines after the last `#### prompt` line, up to
        # its `> Tokens:` report.
        lines = (Path(cwd) / ".aider.chat.history.md").read_text().splitlines()
        start = max(i for i, line in enumerate(lines) if line.startswith("#### ")) + 1
        answer = []
        for line in lines[start:]:
            if line.startswith("> Tokens:"):
                break
            answer.append(line)
        return "\n".join(answer).strip()

    def turn(self, h: list[Any], max_tokens: int, tools: bool = False, stream: bool = False,
             stop: list[str] | None = None, reasoning: bool | None = None) -> dict[str, Any]:
        earlier = [e["content"] for e in h[:-1] if e["role"] == "user"]
        with tempfile.TemporaryDirectory(prefix="colibri-aider-") as cwd:
            for i, q in enumerate(earlier):
                self._aider(cwd, q, False, restore=bool(i))
            text = self._aider(cwd, h[-1]["content"], stream, restore=bool(earlier))
        return {"text": text, "reasoning": "", "calls": [], "history": [], "usage": None}


ADAPTERS = {"llm (CLI)": LlmCli, "aider (CLI)": Aider}
