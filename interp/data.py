"""Text sources for probes: the built-in corpus, `.txt` / `.jsonl` files, and HF datasets when online.

Torch-free at import time (`datasets` is imported only when an HF dataset is actually requested).

Sources accepted by `load_texts`:

* ``builtin`` (= ``builtin:train``), ``builtin:heldout``, ``builtin:all``: the project's own corpus
  (`interp.corpora`); every `HELDOUT_EVERY`-th document is held out, so train and held-out are disjoint and fixed.
* ``path/to/file.txt``: UTF-8 text, one document per paragraph (paragraphs separated by blank lines).
* ``path/to/file.jsonl`` or ``path/to/file.jsonl:FIELD``: one JSON object per line, text in ``"text"`` or FIELD.
* ``hf:NAME[:CONFIG]``, or a bare ``NAME[:CONFIG]`` that is not a file: a Hugging Face dataset (its ``train``
  split, field ``text``, the first `HF_MAX_DOCS` documents, streamed), only when ``INTERP_ONLINE=1``.

Edge cases (docs/reliability.md): an empty file, bytes that are not UTF-8, a malformed JSONL line or a file with no
text is a `ConfigError` naming the config field, the file and the line or byte; exact duplicate documents are
dropped with a `DuplicateDocumentsWarning`; long documents are never truncated: the probes cut the token stream into
chunks of their sequence length (`token_chunks`), which `ProbeConfig.CONTEXT_FIELDS` keeps within the model's
context. `check_source` and `read_jsonl` run these checks for a config's files before any model loads.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from interp import corpora
from interp.errors import ConfigError, DataWarning, MissingPath, did_you_mean, looks_like_path

SPLITS = ("train", "heldout", "all")
HELDOUT_EVERY = 10
SEPARATOR = "\n\n"
SUFFIXES = (".txt", ".jsonl")
HF_MAX_DOCS = 10_000
ALLOWED = ("builtin, builtin:heldout, builtin:all, a .txt or .jsonl[:field] file, "
           "or an HF dataset name with INTERP_ONLINE=1")

_JSONL_FIELD = re.compile(r"^(?P<path>.+\.jsonl):(?P<field>[A-Za-z0-9_.\-]+)$")


class DuplicateDocumentsWarning(DataWarning):
    """Some documents of a source were exact duplicates and were dropped."""


def is_heldout(index: int) -> bool:
    """Whether the built-in document at `index` belongs to the held-out split."""
    return index % HELDOUT_EVERY == HELDOUT_EVERY - 1


def builtin_corpus(split: str = "train", seed: int = 0) -> list[str]:
    """Documents of the built-in corpus: hand-written paragraphs followed by generated documents.

    `split` is "train", "heldout" (every `HELDOUT_EVERY`-th document, about 10%) or "all". The paragraphs are the
    same for every seed; `seed` only changes the generated documents.
    """
    if split not in SPLITS:
        raise ConfigError("split", split, "one of " + ", ".join(SPLITS))
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError("seed", seed, "an integer")
    docs = corpora.documents(seed)
    if split == "all":
        return list(docs)
    want_heldout = split == "heldout"
    return [d for i, d in enumerate(docs) if is_heldout(i) == want_heldout]


def corpus_text(split: str = "train", seed: int = 0) -> str:
    """The documents of `builtin_corpus(split, seed)` joined by blank lines."""
    return SEPARATOR.join(builtin_corpus(split, seed))


def load_texts(source: str, *, seed: int = 0, field: str = "data") -> list[str]:
    """Documents from `source` (see the module docstring); empty documents and exact duplicates are dropped.

    Errors are `ConfigError`s on `field`, the config field that named the source.
    """
    kind = _kind(source, field)
    if kind == "builtin":
        return builtin_corpus(_builtin_split(source, field), seed)
    if kind == "hf":
        return _load_hf(source, source.removeprefix("hf:"), field)
    path, key = _path_and_field(source)
    return _load_file(source, path, key, field)


def check_source(source: str, *, field: str = "data", seed: int = 0, min_tokens: int = 0,
                 count_tokens: Callable[[str], int] | None = None, needed_for: str = "") -> None:
    """Check the text source named by config field `field` before any model loads.

    A file is read as `load_texts` reads it (so the same `ConfigError`s, naming `field`, and the same duplicate
    warning); with `count_tokens` (the model's tokenizer, see `interp.models.token_counter`) it must also hold at
    least `min_tokens` tokens, counted as `token_chunks` concatenates them (stopping once enough). Built-in sources
    are checked by name (always long enough for the built-in sizes); HF datasets only for INTERP_ONLINE (they are
    not downloaded twice).
    """
    kind = _kind(source, field)
    if kind == "builtin":
        _builtin_split(source, field)
        return
    if kind == "hf":
        if os.environ.get("INTERP_ONLINE") != "1":
            raise ConfigError(field, source, "HF datasets are only loaded when INTERP_ONLINE=1")
        return
    texts = load_texts(source, seed=seed, field=field)
    if min_tokens <= 0 or count_tokens is None:
        return
    n = 0
    sep = count_tokens(SEPARATOR)
    for i, text in enumerate(texts):
        n += count_tokens(text) + (sep if i else 0)
        if n >= min_tokens:
            return
    why = f" ({needed_for})" if needed_for else ""
    raise ConfigError(field, source, f"only {n:,} token(s) of text in {len(texts)} document(s), but at least "
                      f"{min_tokens:,} are needed{why}; use more text or a smaller size")


def read_jsonl(source: str, *, field: str, required: Sequence[str] = (), unique: str | None = None,
               duplicates: Literal["error", "first", "last", "all"] = "error", min_rows: int = 1,
               fold_case: bool = False, needed_for: str = "") -> list[dict[str, Any]]:
    """The JSON objects of the JSONL file named by config field `field`, checked before any model loads.

    `ConfigError` naming `field` for a missing file or a directory, an empty file, bytes that are not UTF-8, a line
    that is not a JSON object or lacks a `required` key, or fewer than `min_rows` rows. Rows whose `unique` value
    (stripped, and lower-cased with `fold_case`) repeats an earlier row's are an error with ``duplicates="error"``;
    otherwise a `DataWarning` says which of each the probe's loader uses ("first", "last" or "all").
    """
    if not isinstance(source, str) or not source.strip():
        raise ConfigError(field, source, "a JSONL file")
    path = Path(source).expanduser()
    if not path.exists():
        raise MissingPath(field, source, "a JSONL file")
    text = _read_text(source, path, field)
    rows: list[dict[str, Any]] = []
    first_line: dict[str, int] = {}
    repeats: list[tuple[int, int]] = []
    for lineno, obj in _json_objects(source, text, field):
        missing = [k for k in required if k not in obj]
        if missing:
            keys = ", ".join(sorted(obj)) or "none"
            raise ConfigError(field, source, f"line {lineno} has no {', '.join(repr(k) for k in missing)} "
                              f"(its fields: {keys}); each row needs {', '.join(required)}")
        if unique is not None:
            key = str(obj.get(unique, "")).strip()
            key = key.lower() if fold_case else key
            if key in first_line:
                repeats.append((lineno, first_line[key]))
            else:
                first_line[key] = lineno
        rows.append(obj)
    if len(rows) < min_rows:
        why = f" ({needed_for})" if needed_for else ""
        raise ConfigError(field, source, f"at least {min_rows} row(s){why}, found {len(rows)}")
    if repeats:
        lineno, earlier = repeats[0]
        more = f" (and {len(repeats) - 1} more)" if len(repeats) > 1 else ""
        what = f"line {lineno} repeats the {unique!r} of line {earlier}{more}"
        if duplicates == "error":
            raise ConfigError(field, source, f"distinct {unique!r} values: {what}; remove the repeats")
        use = {"first": "only the first of each is used", "last": "the last of each is used",
               "all": "all are kept, each counting once"}[duplicates]
        warnings.warn(f"{field}={source}: {len(repeats)} repeated {unique!r} value(s), {what}; {use}",
                      DataWarning, stacklevel=2)
    return rows


def token_chunks(tokenizer: Any, texts: Sequence[str], n_seqs: int, seq_len: int) -> list[list[int]]:
    """`n_seqs` contiguous chunks of exactly `seq_len` token ids from `texts`.

    Each text is tokenized without special tokens (the caller decides about BOS), the texts are concatenated with
    the tokens of "\\n\\n" between them, and the stream is cut from the start; texts past what is needed are not
    tokenized. `tokenizer` needs an `encode(text, add_special_tokens=False)` method (any HF tokenizer).
    """
    for field, value in (("n_seqs", n_seqs), ("seq_len", seq_len)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(field, value, "a positive integer")
    need = n_seqs * seq_len
    sep = _encode(tokenizer, SEPARATOR)
    stream: list[int] = []
    for i, text in enumerate(texts):
        if i:
            stream.extend(sep)
        stream.extend(_encode(tokenizer, text))
        if len(stream) >= need:
            break
    if len(stream) < need:
        raise ConfigError("data", f"{len(texts)} documents",
                          f"only {len(stream):,} tokens are available but {need:,} are needed "
                          f"(n_seqs={n_seqs} x seq_len={seq_len}); use more text or fewer or shorter sequences")
    return [stream[i * seq_len:(i + 1) * seq_len] for i in range(n_seqs)]


def bos_id(tokenizer: Any) -> int | None:
    """The BOS id the tokenizer puts before a text (Gemma's ``<bos>``), or None when it adds none (SmolLM2, GPT-2)."""
    bos = getattr(tokenizer, "bos_token_id", None)
    try:
        with_special = list(tokenizer("a")["input_ids"])
        without = _encode(tokenizer, "a")
    except Exception:  # noqa: BLE001 - a tokenizer without the HF call API adds nothing we know of
        return None
    if bos is not None and len(with_special) > len(without) and with_special[0] == bos:
        return int(bos)
    return None


def token_windows(tokenizer: Any, texts: Sequence[str], n: int, length: int, bos: int | None) -> list[list[int]]:
    """`n` windows of exactly `length` token ids cut from `texts`, as the model sees a text: `bos` (the model's
    `info.bos_id`) first when it is not None, then ``length - 1`` contiguous tokens (`token_chunks`); without a BOS,
    `length` contiguous tokens."""
    chunks = token_chunks(tokenizer, texts, n, length - (bos is not None))
    return [[bos, *c] for c in chunks] if bos is not None else chunks


def corpus_info(source: str, *, seed: int = 0, texts: Sequence[str] | None = None) -> dict[str, Any]:
    """Name, document count, size and sha256 of a source, for run manifests.

    The sha256 is over the documents joined by blank lines, as the probes see them (so for "builtin:all" it equals
    `interp.corpora.corpus_sha256(seed)`). Pass `texts` to describe already-loaded documents without reloading.
    """
    if texts is None:
        texts = load_texts(source, seed=seed)
    joined = SEPARATOR.join(texts)
    info: dict[str, Any] = {"name": source, "n_docs": len(texts), "n_chars": len(joined),
                            "sha256": hashlib.sha256(joined.encode("utf-8")).hexdigest()}
    if source == "builtin" or source.startswith("builtin:"):
        split = _builtin_split(source)
        info.update(name=f"builtin:{split}", split=split, seed=seed, version=corpora.VERSION)
    return info


def _builtin_split(source: str, field: str = "data") -> str:
    split = source.partition(":")[2] or "train"
    if split not in SPLITS:
        raise ConfigError(field, source, "builtin, builtin:train, builtin:heldout or builtin:all")
    return split


def _kind(source: str, field: str) -> Literal["builtin", "hf", "file"]:
    """What `source` names: the built-in corpus, an HF dataset or an existing file; ConfigError otherwise."""
    if not isinstance(source, str) or not source.strip():
        raise ConfigError(field, source, ALLOWED)
    if source == "builtin" or source.startswith("builtin:"):
        return "builtin"
    if source.startswith("hf:"):
        return "hf"
    path, _ = _path_and_field(source)
    if path.exists():
        return "file"
    if path.suffix.lower() in SUFFIXES or looks_like_path(source):
        raise MissingPath(field, source, ALLOWED, path if _JSONL_FIELD.match(source) else None)
    if os.environ.get("INTERP_ONLINE") == "1":
        return "hf"
    hint = did_you_mean(source, ("builtin", "builtin:heldout", "builtin:all"))
    raise ConfigError(field, source, f"no such file, and HF dataset names need INTERP_ONLINE=1; {hint}allowed: "
                      f"{ALLOWED}")


def _path_and_field(source: str) -> tuple[Path, str]:
    match = _JSONL_FIELD.match(source)
    if match and not Path(source).exists():
        return Path(match["path"]).expanduser(), match["field"]
    return Path(source).expanduser(), "text"


def _read_text(source: str, path: Path, field: str) -> str:
    """A file's text: ConfigError on `field` for a directory, an empty file or bytes that are not UTF-8."""
    if path.is_dir():
        raise ConfigError(field, source, "is a directory; give a .txt or .jsonl file")
    raw = path.read_bytes()
    if not raw.strip():
        raise ConfigError(field, source, "the file is empty")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(field, source, f"not UTF-8: byte 0x{raw[err.start]:02x} at byte offset {err.start} "
                          "cannot be decoded; save the file as UTF-8") from None
    return text.removeprefix("\ufeff")


def _json_objects(source: str, text: str, field: str):
    """(line number, object) for each non-blank line; ConfigError on `field` for a line that is not an object."""
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise ConfigError(field, source, f"line {lineno} is not valid JSON ({err.msg})") from None
        if not isinstance(obj, dict):
            raise ConfigError(field, source, f"line {lineno} is not a JSON object but {type(obj).__name__}")
        yield lineno, obj


def _load_file(source: str, path: Path, key: str, field: str) -> list[str]:
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES and not path.is_dir():
        raise ConfigError(field, source, f"unsupported file type {path.suffix or '(no suffix)'!r}; use .txt "
                          "(paragraphs separated by blank lines) or .jsonl (one JSON object per line)")
    text = _read_text(source, path, field)
    docs = corpora.split_paragraphs(text) if suffix == ".txt" else _parse_jsonl(source, text, key, field)
    return _clean(source, docs, field)


def _parse_jsonl(source: str, text: str, key: str, field: str) -> list[str]:
    docs = []
    for lineno, obj in _json_objects(source, text, field):
        if key not in obj:
            keys = ", ".join(sorted(obj)) or "none"
            raise ConfigError(field, source, f"line {lineno} has no field {key!r} (its fields: {keys}); "
                              "name the field as path.jsonl:FIELD")
        if not isinstance(obj[key], str):
            raise ConfigError(field, source, f"line {lineno}: field {key!r} is {type(obj[key]).__name__}, "
                              "not a string")
        docs.append(obj[key])
    return docs


def _load_hf(source: str, spec: str, field: str = "data") -> list[str]:
    if os.environ.get("INTERP_ONLINE") != "1":
        raise ConfigError(field, source, "HF datasets are only loaded when INTERP_ONLINE=1")
    name, _, config = spec.partition(":")
    try:
        import datasets  # lazy: heavy, and only needed online
    except ImportError:
        raise ConfigError(field, source, "loading HF datasets needs the `datasets` package") from None
    try:
        stream = datasets.load_dataset(name, config or None, split="train", streaming=True)
        docs = []
        for row in stream:
            value = row.get("text")
            if isinstance(value, str) and value.strip():
                docs.append(value)
            if len(docs) >= HF_MAX_DOCS:
                break
    except Exception as err:  # the library raises many types; the front end wants one line
        raise ConfigError(field, source, f"could not load the HF dataset: {err}") from err
    return _clean(source, docs, field)


def _clean(source: str, docs: Sequence[str], field: str = "data") -> list[str]:
    """Strip documents, drop empty ones and exact duplicates (with a warning); error if nothing is left."""
    seen: set[str] = set()
    out = []
    for doc in docs:
        doc = doc.strip()
        if doc and doc not in seen:
            seen.add(doc)
            out.append(doc)
    if not out:
        raise ConfigError(field, source, "contains no text")
    n_dupes = sum(1 for d in docs if d.strip()) - len(out)
    if n_dupes:
        warnings.warn(f"{field}={source}: dropped {n_dupes} duplicate document(s); only the first of each is used",
                      DuplicateDocumentsWarning, stacklevel=4)
    return out


def _encode(tokenizer: Any, text: str) -> list[int]:
    try:
        ids = tokenizer.encode(text, add_special_tokens=False)
    except TypeError:  # tokenizers without the keyword add no special tokens anyway
        ids = tokenizer.encode(text)
    return [int(i) for i in ids]
