"""`colibri export`: the embedded model as files other engines load, in one family's format.

The weights are the same for every family; what differs is the chat template and the tokens
that end a turn, both read from the family's row of spec/families.yaml. Two formats:

- `hf`: a transformers directory (config.json, model.safetensors, tokenizer.json, and a
  tokenizer_config.json / generation_config.json naming the template and end tokens), which
  transformers and vLLM load as they load any Llama checkpoint.
- `gguf`: one llama-architecture GGUF file with the tokenizer and template in its metadata,
  for llama.cpp and llama-cpp-python. It is written here with the `gguf` package rather than
  by llama.cpp's convert_hf_to_gguf.py, which identifies a BPE tokenizer by hashing its output
  and refuses one it has not seen; this tokenizer is byte-level BPE with GPT-2's split
  pattern, which llama.cpp names the `gpt-2` pre-tokenizer (its vocabulary loader refuses
  "gpt2": "unknown pre-tokenizer type").
"""
from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .families import detect_family_in_rows, family_rows
from .paths import EMBEDDED_MODEL, EMBEDDED_MODEL_ID

FORMATS = ("hf", "gguf")
GGUF_TYPES = ("f32", "f16", "q8_0")
NORMAL, CONTROL, USER_DEFINED = 1, 3, 4  # llama.cpp's token types (gguf.TokenType)
MODEL_NAME = EMBEDDED_MODEL_ID


class ExportError(Exception):
    """A refused export; `code` names the reason (the CLI prints it)."""

    code = "export_error"


class UnknownFamilyError(ExportError):
    code = "unknown_family"


class UnknownFormatError(ExportError):
    code = "unknown_format"


class UnknownTypeError(ExportError):
    code = "unknown_type"


class OutputNotEmptyError(ExportError):
    code = "output_not_empty"


@dataclass(frozen=True)
class FamilyExport:
    """What one family adds to the shared weights: its template and its end tokens."""

    id: str
    template_file: str
    template: str
    end_tokens: tuple[str, ...]  # in the row's order: the first is the one that ends an assistant turn
    end_ids: tuple[int, ...]


Rows = dict[str, dict[str, Any]]


def exportable_families(rows: Rows | None = None) -> list[str]:
    """Families whose shipped template, read back by `detect_family`, names that family again.

    An engine (and colibri itself) knows an export's family only from its template; families
    that borrow another's template (chatml-text and plain use chatml's) would be served as
    that other family, so exporting them would mislabel the files."""
    rows = rows or family_rows()
    out = []
    for fid, row in rows.items():
        f = EMBEDDED_MODEL / str(row.get("template", ""))
        if f.is_file() and detect_family_in_rows(f.read_text(), rows)[0] == fid:
            out.append(fid)
    return out


def family_export(family: str, rows: Rows | None = None) -> FamilyExport:
    rows = rows or family_rows()
    allowed = exportable_families(rows)
    if family not in allowed:
        raise UnknownFamilyError(f"family {family!r} cannot be exported; choose one of {', '.join(allowed)} "
                                 "(the families whose template the embedded model ships as their own)")
    row = rows[family]
    vocab = _tokenizer_json()
    ids = _token_ids(vocab)
    ends = tuple(row["end_tokens"])
    return FamilyExport(family, row["template"], (EMBEDDED_MODEL / row["template"]).read_text(), ends,
                        tuple(ids[t] for t in ends))


def _tokenizer_json() -> dict[str, Any]:
    return json.loads((EMBEDDED_MODEL / "tokenizer.json").read_text())  # type: ignore[no-any-return]


def _token_ids(doc: dict[str, Any]) -> dict[str, int]:
    ids = dict(doc["model"]["vocab"])
    ids.update({t["content"]: t["id"] for t in doc["added_tokens"]})
    return ids


def _check_out(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise OutputNotEmptyError(f"{out} already exists and is not an empty directory; "
                                  "choose a new path or empty it first")


def export(family: str, fmt: str, out: Path | str, *, gguf_type: str = "f32",
           say: Callable[[str], None] = lambda _: None, rows: Rows | None = None) -> list[Path]:
    """Write the embedded model for `family` in format `fmt` into the directory `out` (created;
    it must not exist or be empty). Returns the files written."""
    out = Path(out)
    if fmt not in FORMATS:
        raise UnknownFormatError(f"format {fmt!r} is not one of {', '.join(FORMATS)}")
    if fmt == "gguf" and gguf_type not in GGUF_TYPES:
        raise UnknownTypeError(f"GGUF type {gguf_type!r} is not one of {', '.join(GGUF_TYPES)}")
    fam = family_export(family, rows)
    _check_out(out)
    out.mkdir(parents=True, exist_ok=True)
    say(f"family {fam.id}: template {fam.template_file}, end tokens "
        + ", ".join(f"{t} ({i})" for t, i in zip(fam.end_tokens, fam.end_ids, strict=True)))
    files = _write_hf(fam, out, say) if fmt == "hf" else _write_gguf(fam, out, gguf_type, say)
    files.append(_write_readme(fam, fmt, gguf_type, files, out))
    say(f"wrote {len(files)} files, {sum(f.stat().st_size for f in files) / 1e6:.1f} MB, to {out}")
    return files


# --- transformers directory ---------------------------------------------------------------

def _hf_config(fam: FamilyExport) -> dict[str, Any]:
    cfg: dict[str, Any] = json.loads((EMBEDDED_MODEL / "config.json").read_text())
    # The family's end tokens, not the embedded config's union of every family's: an engine
    # serving this directory stops where this family's turns end.
    cfg["eos_token_id"] = list(fam.end_ids)
    cfg["pad_token_id"] = _token_ids(_tokenizer_json())["<|pad|>"]
    return cfg


def _tokenizer_config(fam: FamilyExport, n_ctx: int) -> dict[str, Any]:
    doc = _tokenizer_json()
    added = {str(t["id"]): {k: t[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")}
             for t in doc["added_tokens"]}
    return {
        # PreTrainedTokenizerFast reads tokenizer.json as it is; a named class would rebuild it.
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": fam.template,
        # No beginning-of-text token: the templates write none and the model was trained without.
        "bos_token": None,
        "eos_token": fam.end_tokens[0],
        "pad_token": "<|pad|>",
        "unk_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": n_ctx,
        "added_tokens_decoder": added,
        "additional_special_tokens": [t["content"] for t in doc["added_tokens"]
                                      if t["special"] and t["content"] not in (fam.end_tokens[0], "<|pad|>")],
    }


def _write_json(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    return path


def _write_hf(fam: FamilyExport, out: Path, say: Callable[[str], None]) -> list[Path]:
    cfg = _hf_config(fam)
    files = [_write_json(out / "config.json", cfg)]
    say("config.json: LlamaForCausalLM, eos_token_id " + str(cfg["eos_token_id"]))
    files.append(Path(shutil.copyfile(EMBEDDED_MODEL / "model.safetensors", out / "model.safetensors")))
    say(f"model.safetensors: {files[-1].stat().st_size / 1e6:.1f} MB, float32")
    files.append(Path(shutil.copyfile(EMBEDDED_MODEL / "tokenizer.json", out / "tokenizer.json")))
    files.append(_write_json(out / "tokenizer_config.json", _tokenizer_config(fam, int(cfg["max_position_embeddings"]))))
    say(f"tokenizer.json, tokenizer_config.json: chat template {fam.template_file}, eos {fam.end_tokens[0]}")
    files.append(_write_json(out / "generation_config.json", {
        "eos_token_id": list(fam.end_ids), "pad_token_id": cfg["pad_token_id"], "do_sample": False}))
    say(f"generation_config.json: eos_token_id {list(fam.end_ids)}")
    return files


# --- GGUF ---------------------------------------------------------------------------------

def gguf_file_name(family: str, gguf_type: str) -> str:
    return f"{MODEL_NAME}-{family}-{gguf_type}.gguf"


def _gguf_vocab(doc: dict[str, Any], vocab_size: int) -> tuple[list[str], list[int]]:
    """Every id's text and llama.cpp token type: special added tokens are control tokens (never
    produced from plain text), the other added tokens user-defined (matched whole in text)."""
    tokens: list[str | None] = [None] * vocab_size
    types = [NORMAL] * vocab_size
    for text, i in doc["model"]["vocab"].items():
        tokens[i] = text
    for t in doc["added_tokens"]:
        tokens[t["id"]] = t["content"]
        types[t["id"]] = CONTROL if t["special"] else USER_DEFINED
    missing = [i for i, t in enumerate(tokens) if t is None]
    if missing:  # pragma: no cover - the shipped tokenizer covers its vocabulary
        raise ExportError(f"tokenizer.json has no text for ids {missing[:5]}")
    return [t for t in tokens if t is not None], types


def _merges(doc: dict[str, Any]) -> list[str]:
    # tokenizers writes merges as pairs (newer) or as "a b" strings (older); GGUF holds strings.
    return [m if isinstance(m, str) else " ".join(m) for m in doc["model"]["merges"]]


def _to_interleaved(w: np.ndarray, heads: int) -> np.ndarray:
    """Query/key rows from the rotate-half order transformers uses (dimension i pairs with
    i + half) to the adjacent-pair order of GGUF's llama tensors (2i pairs with 2i+1), per head."""
    rows, cols = w.shape
    return w.reshape(heads, 2, rows // heads // 2, cols).swapaxes(1, 2).reshape(rows, cols)


def _write_gguf(fam: FamilyExport, out: Path, gguf_type: str, say: Callable[[str], None]) -> list[Path]:
    import gguf
    from safetensors.numpy import load_file

    cfg = json.loads((EMBEDDED_MODEL / "config.json").read_text())
    doc = _tokenizer_json()
    ids = _token_ids(doc)
    heads, kv_heads, dim = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["hidden_size"]
    layers, vocab_size = cfg["num_hidden_layers"], cfg["vocab_size"]
    path = out / gguf_file_name(fam.id, gguf_type)
    qtype = {"f32": gguf.GGMLQuantizationType.F32, "f16": gguf.GGMLQuantizationType.F16,
             "q8_0": gguf.GGMLQuantizationType.Q8_0}[gguf_type]
    file_type = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
                 "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[gguf_type]

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(f"{MODEL_NAME}-{fam.id}")
    w.add_description(f"colibri's embedded model (colibri/models/tiny), {fam.id} family; written by colibri export")
    w.add_file_type(file_type)
    if qtype == gguf.GGMLQuantizationType.Q8_0:
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(dim)
    w.add_block_count(layers)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(dim // heads)
    w.add_rope_freq_base(float(cfg["rope_theta"]))
    w.add_layer_norm_rms_eps(float(cfg["rms_norm_eps"]))
    w.add_vocab_size(vocab_size)

    tokens, types = _gguf_vocab(doc, vocab_size)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")  # llama.cpp's name for GPT-2's split; it refuses "gpt2"
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(_merges(doc))
    # llama.cpp defaults a gpt2 vocabulary's BOS and EOS to id 11 when the file names none; the
    # model has no BOS of its own, so <|endoftext|> stands in (GPT-2's habit) and is never added.
    w.add_bos_token_id(ids["<|endoftext|>"])
    w.add_add_bos_token(False)
    w.add_add_eos_token(False)
    w.add_pad_token_id(ids["<|pad|>"])
    # Up to three end tokens fit the metadata (eos, eot, eom); llama.cpp stops on all three.
    for add, token_id in zip((w.add_eos_token_id, w.add_eot_token_id, w.add_eom_token_id), fam.end_ids, strict=False):
        add(token_id)
    if len(fam.end_ids) > 3:  # pragma: no cover - no family row names more
        raise ExportError(f"family {fam.id} has {len(fam.end_ids)} end tokens; GGUF metadata holds three")
    w.add_chat_template(fam.template)
    say(f"GGUF metadata: llama, {layers} layers, {heads}/{kv_heads} heads, context {cfg['max_position_embeddings']}, "
        f"tokenizer gpt2, pre-tokenizer gpt-2 ({len(tokens)} tokens, {len(_merges(doc))} merges), template {fam.template_file}")

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, layers)
    tensors = load_file(str(EMBEDDED_MODEL / "model.safetensors"))
    for hf_name in sorted(tensors):
        t = tensors[hf_name].astype(np.float32)
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if name is None:  # pragma: no cover - every Llama tensor has a GGUF name
            raise ExportError(f"no GGUF name for tensor {hf_name}")
        if hf_name.endswith("q_proj.weight"):
            t = _to_interleaved(t, heads)
        elif hf_name.endswith("k_proj.weight"):
            t = _to_interleaved(t, kv_heads)
        if t.ndim == 1 or qtype == gguf.GGMLQuantizationType.F32:  # norms stay F32, as llama.cpp keeps them
            w.add_tensor(name, t)
        elif qtype == gguf.GGMLQuantizationType.F16:
            w.add_tensor(name, t.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(t, qtype), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    say(f"{path.name}: {len(tensors)} tensors, {gguf_type}, {path.stat().st_size / 1e6:.1f} MB")
    return [path]


# --- README -------------------------------------------------------------------------------

def _write_readme(fam: FamilyExport, fmt: str, gguf_type: str, files: list[Path], out: Path) -> Path:
    listing = "\n".join(f"- `{f.name}`" for f in files)
    ends = ", ".join(f"`{t}` ({i})" for t, i in zip(fam.end_tokens, fam.end_ids, strict=True))
    if fmt == "hf":
        how = ("Load it as any Llama checkpoint: `AutoModelForCausalLM.from_pretrained(DIR)` and\n"
               "`AutoTokenizer.from_pretrained(DIR)` (its `apply_chat_template` renders the family's template),\n"
               "`vllm serve DIR --dtype float32`, or `colibri serve --model DIR` (the family is detected from\n"
               "the template).")
        layout = ("`generation_config.json` and `config.json` name the end tokens; `tokenizer_config.json` holds\n"
                  "the chat template.")
    else:
        gguf_name = gguf_file_name(fam.id, gguf_type)
        how = (f"`llama-server -m {gguf_name} --jinja` (llama.cpp), `llama_cpp.Llama(model_path=...)`,\n"
               f"or `colibri serve --model {gguf_name}`.")
        layout = (f"Tensors are {gguf_type} (norms always f32). The metadata holds the tokenizer (byte-level BPE,\n"
                  "pre-tokenizer `gpt-2`, role markers as control tokens, tags such as `<think>` as user-defined\n"
                  "tokens), the chat template (`tokenizer.chat_template`) and the end tokens as eos / eot / eom.\n"
                  "BOS is `<|endoftext|>` and never added: the model was trained without one.")
    text = f"""# {MODEL_NAME}, {fam.id} family ({fmt})

colibri's embedded model (a 1.97M-parameter Llama trained on a synthetic corpus to chat, call
tools and write reasoning blocks; see colibri/models/tiny/README.md in the colibri package), written
by `colibri export --family {fam.id} --format {fmt}` for engines other than colibri. It is a shape
model for testing servers' tool-call and reasoning parsers, not a source of facts.

Family `{fam.id}` (spec/families.yaml): chat template `{fam.template_file}`; a turn ends with {ends}.
The same prompt gives the same greedy tokens here as in colibri.

{how}

{layout}

{listing}
- `README.md`
"""
    path = out / "README.md"
    path.write_text(text)
    return path
