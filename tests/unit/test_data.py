"""The built-in corpus (interp.corpora) and the text sources (interp.data)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import types
from pathlib import Path

import pytest

from interp import corpora
from interp.data import (
    HELDOUT_EVERY,
    DuplicateDocumentsWarning,
    bos_id,
    builtin_corpus,
    corpus_info,
    corpus_text,
    load_texts,
    token_chunks,
    token_windows,
)
from interp.errors import ConfigError

TOKENIZER_DIR = Path("/root/.cache/interp/models/smollm2-135m")


class CharTokenizer:
    """One token per character: enough to test chunking without a model."""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        assert add_special_tokens is False
        return [ord(c) for c in text]


def write(tmp_path: Path, name: str, content: str | bytes) -> str:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return str(path)


# --- the corpus -----------------------------------------------------------------------------------------------


def test_same_seed_same_text_and_sha():
    assert corpus_text("all", 0) == corpus_text("all", 0)
    assert corpora.corpus_sha256(0) == corpora.corpus_sha256(0)
    assert corpora.corpus_sha256(1) != corpora.corpus_sha256(0)
    assert corpora.paragraphs() == corpora.documents(1)[: len(corpora.paragraphs())]


def test_sha_is_pinned_for_this_version():
    """A change to the text without a VERSION bump would silently change everyone's numbers."""
    assert corpora.corpus_sha256(0) == corpora.PINNED_SHA256[0]
    with pytest.raises(ConfigError, match="version"):
        corpora.corpus_sha256(0, version="0")


def test_same_text_in_a_fresh_process_with_another_hash_seed():
    code = "from interp import corpora; print(corpora.corpus_sha256(0))"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == corpora.corpus_sha256(0)


def test_heldout_split_is_fixed_and_disjoint_from_train():
    train, held, every = builtin_corpus("train"), builtin_corpus("heldout"), builtin_corpus("all")
    assert not set(train) & set(held)
    assert len(train) + len(held) == len(every)
    assert held == every[HELDOUT_EVERY - 1 :: HELDOUT_EVERY]
    assert len(set(every)) == len(every), "the corpus has duplicate documents"
    with pytest.raises(ConfigError):
        builtin_corpus("test")


def test_at_least_400k_estimated_tokens():
    words = sum(len(d.split()) for d in builtin_corpus("all"))
    assert words * 1.3 >= 400_000


def test_at_least_300_hand_written_paragraphs_across_genres():
    by_genre = corpora.paragraphs_by_genre()
    assert len(corpora.paragraphs()) >= 300
    assert len(by_genre) >= 8
    lengths = [len(p.split()) for p in corpora.paragraphs()]
    assert min(lengths) >= 40 and max(lengths) <= 200
    assert len(set(corpora.paragraphs())) == len(corpora.paragraphs())


def test_generated_documents_are_complete():
    docs = corpora.generated(0)
    assert len(docs) == corpora.N_GENERATED
    assert all(len(d.split()) >= 30 for d in docs)
    assert "{" not in "".join(docs) and "}" not in "".join(docs), "an unfilled template slot"


@pytest.mark.parametrize("name", [name for name, _ in corpora.GENERATORS])
def test_each_generator_is_deterministic_and_varied(name):
    make = dict(corpora.GENERATORS)[name]
    first = [make(random.Random(s)) for s in range(20)]
    assert first == [make(random.Random(s)) for s in range(20)]
    assert len(set(first)) == 20
    assert all(doc.rstrip()[-1] in ".!?\"" or doc.rstrip().split()[-1].istitle() for doc in first)


def test_manifest_records_version_seed_and_sha():
    m = corpora.manifest(0)
    assert m["version"] == corpora.VERSION and m["seed"] == 0 and m["sha256"] == corpora.corpus_sha256(0)
    assert m["n_docs"] == m["n_paragraphs"] + m["n_generated"]


@pytest.mark.skipif(not TOKENIZER_DIR.exists(), reason="SmolLM2 tokenizer not cached")
def test_at_least_400k_smollm2_tokens():
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))
    docs = builtin_corpus("all")
    ids = tok(docs, add_special_tokens=False)["input_ids"]  # batched: much faster than one huge string
    n = sum(map(len, ids)) + len(tok.encode("\n\n", add_special_tokens=False)) * (len(docs) - 1)
    assert n >= 400_000


def test_import_does_not_pull_in_torch():
    code = ("import sys, interp; before = 'torch' in sys.modules; import interp.data; "
            "print(before, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    if out[0] == "True":
        pytest.skip("the interp package itself imports torch")
    assert out[1] == "False"


# --- load_texts ---------------------------------------------------------------------------------------------------


def test_builtin_sources():
    assert load_texts("builtin") == builtin_corpus("train")
    assert load_texts("builtin:heldout") == builtin_corpus("heldout")
    assert load_texts("builtin:all", seed=3) == builtin_corpus("all", seed=3)
    with pytest.raises(ConfigError, match="builtin:heldout"):
        load_texts("builtin:dev")


def test_txt_paragraphs_split_on_blank_lines(tmp_path):
    path = write(tmp_path, "a.txt", "\ufeffFirst paragraph,\nstill first.\r\n\r\nSecond one.\n \n\nThird.\n")
    assert load_texts(path) == ["First paragraph,\nstill first.", "Second one.", "Third."]


def test_jsonl_default_and_named_field(tmp_path):
    lines = [{"text": "alpha", "body": "one"}, {"text": "beta", "body": "two"}]
    path = write(tmp_path, "a.jsonl", "\n".join(json.dumps(x) for x in lines) + "\n\n")
    assert load_texts(path) == ["alpha", "beta"]
    assert load_texts(path + ":body") == ["one", "two"]


@pytest.mark.parametrize(
    ("name", "content", "match"),
    [
        ("empty.txt", b"", "empty"),
        ("blank.jsonl", b"  \n\n", "empty"),
        ("latin1.txt", "caf\u00e9 ok".encode("latin-1"), r"not UTF-8: byte 0xe9 at byte offset 3"),
        ("table.csv", b"a,b\n1,2\n", "unsupported file type '.csv'"),
        ("bad.jsonl", b'{"text": "fine"}\n{"text": oops}\n', "line 2 is not valid JSON"),
        ("list.jsonl", b'["a", "b"]\n', "line 1 is not a JSON object"),
        ("nofield.jsonl", b'{"text": "a"}\n{"body": "b"}\n', "line 2 has no field 'text'"),
        ("number.jsonl", b'{"text": 5}\n', "line 1: field 'text' is int, not a string"),
        ("spaces.txt", b"  \n \n", "empty"),
    ],
)
def test_file_errors_name_the_problem(tmp_path, name, content, match):
    path = write(tmp_path, name, content)
    with pytest.raises(ConfigError, match=match) as info:
        load_texts(path)
    assert info.value.field == "data" and info.value.value == path


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(ConfigError, match="data: .*nope.txt does not exist"):
        load_texts(str(tmp_path / "nope.txt"))
    with pytest.raises(ConfigError, match="data: .*nope.jsonl does not exist"):
        load_texts(str(tmp_path / "nope.jsonl:body"))
    with pytest.raises(ConfigError, match="directory"):
        load_texts(str(tmp_path))
    with pytest.raises(ConfigError):
        load_texts("")


def test_jsonl_with_only_empty_texts_is_empty(tmp_path):
    path = write(tmp_path, "e.jsonl", '{"text": ""}\n{"text": "  "}\n')
    with pytest.raises(ConfigError, match="no text"):
        load_texts(path)


def test_duplicates_are_dropped_with_a_warning(tmp_path):
    path = write(tmp_path, "d.txt", "same\n\nother\n\nsame\n\n  same  \n")
    with pytest.warns(DuplicateDocumentsWarning, match="dropped 2 duplicate"):
        assert load_texts(path) == ["same", "other"]


def test_hf_names_need_online(monkeypatch):
    monkeypatch.delenv("INTERP_ONLINE", raising=False)
    with pytest.raises(ConfigError, match="INTERP_ONLINE=1"):
        load_texts("someone/some-dataset")
    with pytest.raises(ConfigError, match="INTERP_ONLINE=1"):
        load_texts("hf:someone/some-dataset")


def test_hf_dataset_when_online(monkeypatch):
    calls = []

    def load_dataset(name, config, split, streaming):
        calls.append((name, config, split, streaming))
        return iter([{"text": "one"}, {"text": ""}, {"text": "two"}, {"other": 1}])

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    monkeypatch.setenv("INTERP_ONLINE", "1")
    assert load_texts("someone/tiny:cfg") == ["one", "two"]
    assert calls == [("someone/tiny", "cfg", "train", True)]


# --- token_chunks and corpus_info ------------------------------------------------------------------------------


def test_token_chunks_are_contiguous_and_exact():
    chunks = token_chunks(CharTokenizer(), ["abc", "defg"], n_seqs=3, seq_len=3)
    assert chunks == [[ord(c) for c in s] for s in ("abc", "\n\nd", "efg")]


def test_token_chunks_stop_once_enough():
    class Counting(CharTokenizer):
        seen: list[str] = []

        def encode(self, text, add_special_tokens=True):
            self.seen.append(text)
            return super().encode(text, add_special_tokens)

    tok = Counting()
    token_chunks(tok, ["aaaa", "bbbb", "cccc"], n_seqs=1, seq_len=4)
    assert "cccc" not in tok.seen


def test_token_chunks_not_enough_tokens():
    with pytest.raises(ConfigError, match=r"only 9 tokens are available but 10 are needed") as info:
        token_chunks(CharTokenizer(), ["abc", "defg"], n_seqs=2, seq_len=5)
    assert info.value.field == "data"
    with pytest.raises(ConfigError, match="positive"):
        token_chunks(CharTokenizer(), ["abc"], n_seqs=0, seq_len=5)


@pytest.mark.skipif(not TOKENIZER_DIR.exists(), reason="SmolLM2 tokenizer not cached")
def test_token_chunks_with_the_real_tokenizer():
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))
    chunks = token_chunks(tok, builtin_corpus("heldout"), n_seqs=8, seq_len=128)
    assert [len(c) for c in chunks] == [128] * 8
    assert tok.bos_token_id not in chunks[0]


def test_token_windows_put_the_bos_first_and_keep_the_length():
    texts = ["abc", "defg"]
    assert token_windows(CharTokenizer(), texts, 2, 3, None) == token_chunks(CharTokenizer(), texts, 2, 3)
    assert token_windows(CharTokenizer(), texts, 2, 3, 0) == [[0, ord("a"), ord("b")], [0, ord("c"), ord("\n")]]


@pytest.mark.parametrize("name, has_bos", [("smollm2-135m", False), ("gemma3-270m", True)])
def test_bos_id_follows_what_the_tokenizer_puts_first(name, has_bos):
    path = TOKENIZER_DIR.parent / name
    if not path.exists():
        pytest.skip(f"{name} not cached")
    tok = pytest.importorskip("transformers").AutoTokenizer.from_pretrained(str(path))
    got = bos_id(tok)
    assert got == (tok.bos_token_id if has_bos else None)
    assert (got is not None) == (tok("a")["input_ids"][0] == tok.bos_token_id)
    assert bos_id(CharTokenizer()) is None  # no HF call API: nothing known to be added


def test_corpus_info(tmp_path):
    info = corpus_info("builtin:all")
    assert info["sha256"] == corpora.corpus_sha256(0) and info["n_docs"] == len(builtin_corpus("all"))
    assert corpus_info("builtin")["name"] == "builtin:train"
    assert corpus_info("builtin:heldout")["version"] == corpora.VERSION
    path = write(tmp_path, "a.txt", "one\n\ntwo\n")
    info = corpus_info(path)
    assert info["name"] == path and info["n_docs"] == 2 and len(info["sha256"]) == 64
    assert corpus_info(path, texts=["one", "two"]) == info
