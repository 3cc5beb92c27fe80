"""Data edge cases: an empty file, bytes that are not UTF-8, a one-token text, a text longer than the model's
context and repeated prompts, for the config fields that name user data.

Each is either a ConfigError naming the field before any model loads (through the CLI: exit 2, one stderr line, no
run directory, no torch) or the documented handling (docs/reliability.md): duplicate corpus documents are dropped
with a warning, repeated prompts are an error where they would bias a measure (keystone's disjoint groups,
graph_sawtooth's splits) and a warning where the probe's loader keeps or drops them; long documents are cut into
chunks of the probe's sequence length, which must fit in the model's context.

Before this suite, every probe read its files only after the model had loaded, with the field always called
"data", and the probes' JSONL readers failed on non-UTF-8 bytes with a bare UnicodeDecodeError (exit 1).
The pre-load checks (`ProbeConfig.validate_data`) read files with a tokenizer-only token counter (`tokenizers`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from interp import embedded
from interp.config import ModelLimits
from interp.data import DuplicateDocumentsWarning, check_source, corpus_text, load_texts, read_jsonl, token_chunks
from interp.errors import ConfigError, DataWarning
from interp.models import Resolved, token_counter
from interp.registry import probes_available
from interp.runner import prepare

TOKENIZER = embedded.model_cache_dir("smollm2-135m") / "tokenizer.json"
needs_tokenizer = pytest.mark.skipif(not TOKENIZER.is_file(), reason="the embedded model is not converted yet")
LONG = " ".join(["word"] * 9000)  # 9,000 tokens: longer than the embedded model's 8,192-token context
N_CTX = 500  # the context of the weightless model directory below


def cli(*args: str, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "interp.cli", "run", *args, "--out", str(out)],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def files(tmp_path):
    """name -> path of a small file; "rows.jsonl" etc. are written by `jsonl`."""

    def write(name: str, content: str | bytes) -> str:
        p = tmp_path / name
        p.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
        return str(p)

    return write


def jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


@pytest.fixture(scope="module")
def weightless_model(tmp_path_factory) -> Path:
    """A model directory with a config (30 layers, a 500-token context) and the embedded tokenizer, but no weights:
    enough for every check before loading; a run that got past them would fail to load."""
    if not TOKENIZER.is_file():
        pytest.skip("the embedded model is not converted yet")
    d = tmp_path_factory.mktemp("weightless") / "model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 30,
                                               "max_position_embeddings": N_CTX}))
    (d / "tokenizer.json").write_bytes(TOKENIZER.read_bytes())
    return d


def graph_rows(n: int) -> list[dict]:
    return [{"prompt": f"Edges: (0, 1) (1, {i + 2}). Is 0 connected to {i + 2}?", "answer": "yes",
             "candidates": ["yes", "no"]} for i in range(n)]


def topics(n: int) -> list[dict]:
    return [{"topic": f"topic number {i}", "category": "all"} for i in range(n)]


EMPTY, LATIN1, ONE_TOKEN = b"", "caf\u00e9 au lait".encode("latin-1"), "Hi"

#: (probe, field, file name, content, what the one stderr line must say): each fails before any model loads.
CASES = [
    # empty files
    ("atoms", "corpus", "c.txt", EMPTY, "the file is empty"),
    ("graph_sawtooth", "ppl_data", "c.jsonl", EMPTY, "the file is empty"),
    ("keystone", "prompt_source", "p.jsonl", EMPTY, "the file is empty"),
    ("keystone", "task_suite", "t.jsonl", EMPTY, "the file is empty"),
    ("self_interp", "topics_file", "t.jsonl", EMPTY, "the file is empty"),
    # bytes that are not UTF-8
    ("sae_falsification", "corpus", "c.txt", LATIN1, "not UTF-8: byte 0xe9 at byte offset 3"),
    ("keystone", "ppl_corpus", "c.txt", LATIN1, "not UTF-8: byte 0xe9"),
    ("keystone", "prompt_source", "p.jsonl", LATIN1, "not UTF-8: byte 0xe9"),
    ("graph_sawtooth", "data", "d.jsonl", LATIN1, "not UTF-8: byte 0xe9"),
    ("self_interp", "sae_labels_file", "l.jsonl", LATIN1, "not UTF-8: byte 0xe9"),
    # a one-token text where a probe needs a corpus
    ("atoms", "corpus", "c.txt", ONE_TOKEN, "only 1 token(s) of text in 1 document(s), but at least 2,048"),
    ("sae_falsification", "corpus", "c.jsonl", jsonl([{"text": ONE_TOKEN}]), "only 1 token(s) of text"),
    ("graph_sawtooth", "ppl_data", "c.txt", ONE_TOKEN, "only 1 token(s) of text"),
    # texts longer than the context
    ("keystone", "prompt_source", "p.jsonl", jsonl([{"prompt": "Short."}, {"prompt": LONG}]),
     "prompts of at most 8176 tokens (the context of smollm2-135m, 8192, less max_new_tokens=16); row 2 has 9000"),
    ("graph_sawtooth", "data", "d.jsonl", jsonl(graph_rows(11) + [{**graph_rows(1)[0], "prompt": LONG}]),
     "prompts shorter than the context of smollm2-135m (8192 tokens); row 12 has 9000"),
    # repeated prompts where they would bias the measure
    ("keystone", "prompt_source", "p.jsonl", jsonl([{"prompt": "A b."}, {"prompt": "C d."}, {"prompt": " A b. "}]),
     "distinct 'prompt' values: line 3 repeats the 'prompt' of line 1"),
    ("graph_sawtooth", "data", "d.jsonl", jsonl(graph_rows(11) + graph_rows(1)),
     "distinct 'prompt' values: line 12 repeats the 'prompt' of line 1"),
    # malformed rows
    ("keystone", "task_suite", "t.jsonl", jsonl([{"prompt": "2 + 2 ="}]), "line 1 has no 'answer'"),
    ("self_interp", "topics_file", "t.jsonl", jsonl(topics(5)), "at least 20 distinct topics (found 5)"),
]


@needs_tokenizer
@pytest.mark.parametrize("probe, field, name, content, needle", CASES,
                         ids=[f"{c[0]}.{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_bad_data_fails_before_the_model_in_one_line(tmp_path, files, probe, field, name, content, needle):
    path = files(name, content)
    out = tmp_path / "out"
    t0 = time.perf_counter()
    r = cli(probe, "--size", "micro", "--set", f"{field}={path}", out=out)
    elapsed = time.perf_counter() - t0
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, r.stderr
    assert len(lines) == 1 and lines[0].startswith(f"interp: {field}="), r.stderr
    assert needle in lines[0], lines[0]
    assert not out.exists(), "a run directory was made: the model would have loaded"
    assert elapsed < 15, f"{elapsed:.1f}s: the check must not load the model"


@needs_tokenizer
def test_a_prompt_longer_than_the_context_fails_without_torch(tmp_path):
    """logit_lens's prompt is counted with the tokenizer alone (no torch, no transformers) before loading."""
    code = ("import sys; from interp.cli import main\n"
            f"rc = main(['run', 'logit_lens', '--set', 'max_tokens=8192', '--set', 'prompt={LONG}', "
            f"'--out', {str(tmp_path)!r}])\n"
            "print(rc, [m for m in ('torch', 'transformers', 'transformer_lens') if m in sys.modules])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "2 []", r.stdout + r.stderr
    assert r.stderr.strip() == ("interp: prompt='<9000 tokens>' is invalid: at most max_tokens=8192 tokens "
                                "(longer prompts are an error, not truncated)")


def test_every_context_field_must_fit_the_context(weightless_model):
    """Sequence lengths longer than the model's context fail before loading; the context itself is fine."""
    checked = []
    for name, spec in sorted(probes_available().items()):
        for field in spec.config_cls.CONTEXT_FIELDS:
            prepare(name, {"model": str(weightless_model), field: N_CTX})
            with pytest.raises(ConfigError) as e:
                prepare(name, {"model": str(weightless_model), field: N_CTX + 1})
            assert e.value.field == field and f"at most the context of {weightless_model} ({N_CTX} tokens)" in str(
                e.value), str(e.value)
            checked.append(f"{name}.{field}")
    assert {"logit_lens.max_tokens", "atoms.ctx_len", "keystone.ppl_len", "lockin.seq_len"} <= set(checked), checked


def test_a_long_prompt_on_a_short_context_model(weightless_model):
    with pytest.raises(ConfigError, match=r"max_tokens=1000 is invalid: at most the context of .* \(500 tokens\)"):
        prepare("logit_lens", {"model": str(weightless_model), "max_tokens": 1000})
    with pytest.raises(ConfigError, match=r"prompt='<600 tokens>' is invalid: at most max_tokens=500"):
        prepare("logit_lens", {"model": str(weightless_model), "max_tokens": N_CTX, "prompt": " ".join(["word"] * 600)})


# ============================================================================= documented handling


def test_a_one_token_prompt_is_a_one_position_lens(tiny_model_dir, tiny_model, tmp_path):
    from interp.runner import execute
    from interp.store import load_run

    spec, cfg = prepare("logit_lens", {"model": str(tiny_model_dir), "prompt": "Paris", "size": "micro"})
    run = load_run(execute(spec, cfg, out=tmp_path, model=tiny_model, progress=False))
    assert run.status == "done" and run.metrics["n_tokens"] == 1, run.metrics
    assert run.tensor_file("lens")["final_rank"].shape == (2, 1)
    assert list(run.table("tokens")["token"]) == ["Paris"]


@needs_tokenizer
def test_duplicate_corpus_documents_are_dropped_with_one_warning_line(tmp_path, files):
    text = corpus_text("heldout")
    first = text.split("\n\n")[0]
    path = files("c.txt", f"{text}\n\n{first}\n\n{first}\n")
    with pytest.warns(DuplicateDocumentsWarning, match=r"corpus=.*dropped 2 duplicate document\(s\); only the first"):
        prepare("atoms", {"size": "micro", "corpus": path})
    with pytest.warns(DuplicateDocumentsWarning):
        assert load_texts(path, field="corpus") == text.split("\n\n")
    # through the CLI: one "interp: warning:" line, shown once although two checks read the file
    src = files("t.jsonl", jsonl(topics(20) + [{"topic": "TOPIC NUMBER 3"}]))
    r = cli("self_interp", "--size", "micro", "--set", f"topics_file={src}", "--set", "sae_labels_file=/no/such.jsonl",
            out=tmp_path / "out")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 2, r.stderr
    assert lines[0].startswith("interp: warning: topics_file=") and "only the first of each is used" in lines[0]
    assert lines[1].startswith("interp: sae_labels_file: /no/such.jsonl does not exist"), lines[1]


def test_repeated_topics_tasks_and_labels_warn_and_say_which_is_used(files):
    from interp_probes.self_interp.topics import load_topics

    path = files("t.jsonl", jsonl(topics(20) + [{"topic": " Topic Number 7 "}, {"topic": "topic number 8"}]))
    with pytest.warns(DataWarning, match=r"2 repeated 'topic' value\(s\), line 21 repeats .* of line 8 \(and 1 more\); "
                                         r"only the first of each is used"):
        prepare("self_interp", {"size": "micro", "topics_file": path})
    assert len(load_topics(path)) == 20, "the loader does not use the first of each"

    from interp_probes.keystone.data import load_tasks

    tasks = files("k.jsonl", jsonl([{"prompt": "2 + 2 =", "answer": "4"}] * 2 + [{"prompt": "3 + 3 =", "answer": "6"}]))
    with pytest.warns(DataWarning, match="all are kept, each counting once"):
        prepare("keystone", {"size": "micro", "task_suite": tasks})
    assert len(load_tasks(tasks, 10)) == 3, "the loader does not keep every row"

    labels = files("l.jsonl", jsonl([{"latent": 3, "label": "old"}, {"latent": 3, "label": "new"}]))
    with pytest.warns(DataWarning, match="the last of each is used"):
        prepare("self_interp", {"size": "micro", "sae_branch": "labels", "sae_labels_file": labels})


@needs_tokenizer
def test_a_long_document_is_cut_into_context_sized_chunks(files):
    """A text longer than the context is not an error in a corpus: the stream is cut into seq_len chunks."""
    path = files("long.txt", LONG)
    counter = token_counter(Resolved("tok", "local", str(TOKENIZER.parent)))
    check_source(path, field="corpus", min_tokens=9000, count_tokens=counter)
    with pytest.raises(ConfigError, match="only 9,000 token"):
        check_source(path, field="corpus", min_tokens=9001, count_tokens=counter)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(TOKENIZER))

    class Ids:
        def encode(self, text, add_special_tokens=False):
            return tok.encode(text, add_special_tokens=add_special_tokens).ids

    chunks = token_chunks(Ids(), load_texts(path), n_seqs=4, seq_len=2048)
    assert [len(c) for c in chunks] == [2048] * 4


# ============================================================================= the data functions


@pytest.mark.parametrize("content, needle", [
    (EMPTY, "the file is empty"), (b" \n\n", "the file is empty"), (LATIN1, "not UTF-8: byte 0xe9 at byte offset 3"),
    (b'{"prompt": "a"}\n{"prompt": oops}\n', "line 2 is not valid JSON"),
    (b'["a"]\n', "line 1 is not a JSON object but list"),
    (b'{"text": "a"}\n', "line 1 has no 'prompt' (its fields: text)"),
])
def test_read_jsonl_names_the_field_and_the_problem(files, content, needle):
    path = files("x.jsonl", content)
    with pytest.raises(ConfigError) as e:
        read_jsonl(path, field="prompt_source", required=("prompt",))
    assert e.value.field == "prompt_source" and needle in str(e.value), str(e.value)
    with pytest.raises(ConfigError, match="prompt_source: .* does not exist"):
        read_jsonl(path + ".missing", field="prompt_source")


@pytest.mark.parametrize("content, needle", [
    (EMPTY, "the file is empty"), (LATIN1, "not UTF-8"), (b"\n \n", "the file is empty"),
])
def test_check_source_and_load_texts_name_the_field(files, content, needle):
    path = files("x.txt", content)
    for call in (check_source, load_texts):
        with pytest.raises(ConfigError) as e:
            call(path, field="ppl_corpus")
        assert e.value.field == "ppl_corpus" and needle in str(e.value)


def test_one_token_texts_without_a_tokenizer_are_left_to_the_run(files):
    """Without a tokenizer on disk the count is skipped; token_chunks then fails at run time, naming the shortfall."""
    path = files("one.txt", ONE_TOKEN)
    check_source(path, field="corpus", min_tokens=10_000, count_tokens=None)

    class Chars:
        def encode(self, text, add_special_tokens=False):
            return [ord(c) for c in text]

    with pytest.raises(ConfigError, match=r"only 2 tokens are available but 64 are needed"):
        token_chunks(Chars(), load_texts(path), n_seqs=1, seq_len=64)


def test_builtin_sources_are_checked_by_name():
    check_source("builtin:heldout", field="corpus", min_tokens=10**9, count_tokens=len)
    with pytest.raises(ConfigError, match="corpus='builtin:dev'"):
        check_source("builtin:dev", field="corpus")
    assert ModelLimits().n_ctx is None
