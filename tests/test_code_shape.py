"""The shape the project brief asks of the code, checked statically (ast, no imports): no import
circle among the modules of colibri/, conformance/ and training/; no module over 600 lines
outside csrc/; no function over 80 lines outside csrc/ and training/ (bench/ and tests/ included)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("colibri", "conformance", "training")
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
#: Where long functions are allowed: training/'s scripts run top to bottom, as research code does.
FUNCTION_EXEMPT = ("training",)
#: Folders that hold no source of the project's own (build output, caches, C sources).
NOT_SOURCE = {"csrc", "build", "dist", "node_modules", "__pycache__"}


def sources(*suffixes: str) -> list[Path]:
    return sorted(p for s in suffixes for p in ROOT.rglob(f"*{s}")
                  if not any(part.startswith(".") or part in NOT_SOURCE for part in p.relative_to(ROOT).parts[:-1]))


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
            if "__pycache__" not in p.parts}


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules `name` imports, at any depth of its code (a function-level import
    closes a circle as surely as a top-level one). training/'s scripts import each other by
    bare name (they put training/ on sys.path)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    script = name.startswith("training.")

    def resolve(dotted: str) -> str | None:
        if script and f"training.{dotted}" in known:
            return f"training.{dotted}"
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(r for a in node.names if (r := resolve(a.name)))
        elif isinstance(node, ast.ImportFrom):
            base = (".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
                    if node.level else node.module or "")
            for a in node.names:  # `from . import x` names a module; `from .m import f` names m
                full = f"{base}.{a.name}"
                r = full if full in known else resolve(base)
                if r:
                    out.add(r)
    out.discard(name)
    return out


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle():
    known = modules()
    graph = {name: imports(name, path, known) for name, path in known.items()}
    assert circles(graph) == []


def test_the_circle_finder_finds_one():
    # the guard above can fail: a two-module circle, and one through a function-level import
    assert circles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_module_over_600_lines():
    long = {str(p.relative_to(ROOT)): n for p in sources(".py", ".pyx")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert long == {}


def test_no_function_over_80_lines():
    long = {}
    for p in sources(".py"):
        if p.relative_to(ROOT).parts[0] in FUNCTION_EXEMPT:
            continue
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long[f"{p.relative_to(ROOT)}:{node.lineno} {node.name}"] = n
    assert long == {}
