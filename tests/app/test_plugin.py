"""A third-party probe: a tiny plugin distribution built and installed into a temporary path (pip --target) with
an `interp.probes` entry point, seen registered by `interp list`, run by `interp run` on the tiny random model,
rendered by its own page in the dashboard (AppTest) and displayed with its headline figure in a notebook."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from interp_app.testing import APP

PLUGIN = {
    "pyproject.toml": """
        [build-system]
        requires = ["setuptools>=68"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "interp-token-count"
        version = "0.1.0"

        [project.entry-points."interp.probes"]
        token_count = "interp_token_count"

        [tool.setuptools]
        packages = ["interp_token_count"]
    """,
    "interp_token_count/__init__.py": '''
        """A third-party probe for interp: the tokens of a text and the model's next-token guess at each."""

        from dataclasses import dataclass

        from interp.config import ProbeConfig
        from interp.errors import ConfigError
        from interp.registry import probe


        @probe("token_count", run="interp_token_count.probe:run", page="interp_token_count.page")
        @dataclass(frozen=True)
        class TokenCountConfig(ProbeConfig):
            """Token count: the tokens of a text and the model's top-1 next token at each (a plugin)."""

            text: str = "Plugins register through entry points."
            """The text to read."""

            def validate(self) -> None:
                super().validate()
                if not self.text.strip():
                    raise ConfigError("text", self.text, "a non-empty text")
    ''',
    "interp_token_count/probe.py": '''
        import torch


        def run(cfg, ctx):
            model = ctx.model
            enc = model.tokenize([cfg.text])
            with torch.no_grad():
                logits = model(enc["input_ids"], enc["attention_mask"])  # (1, pos, vocab)
            toks = model.to_str_tokens(enc["input_ids"][0])
            nxt = model.to_str_tokens(logits[0].argmax(-1))
            ctx.save_table("tokens", {"position": list(range(len(toks))), "token": toks, "next_top1": nxt})
            ctx.log_metrics(n_tokens=len(toks), last_top1=nxt[-1])
    ''',
    "interp_token_count/page.py": '''
        import plotly.graph_objects as go
        import streamlit as st

        from interp_app import common

        METHOD = "https://example.org/token-count"


        def headline(run):
            t = run.table("tokens")
            return go.Figure(go.Bar(x=t["position"], y=[len(s) for s in t["token"]], name="token length"))


        def render(run):
            common.intro("How many tokens does the text have, and what comes next?", METHOD, run)
            st.metric("tokens", run.metrics["n_tokens"])
            st.dataframe(run.table("tokens"), hide_index=True)
    ''',
}


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory) -> Path:
    """The plugin built from source and installed (no deps, no build isolation) into a fresh target path."""
    src = tmp_path_factory.mktemp("plugin-src")
    for name, text in PLUGIN.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    site = tmp_path_factory.mktemp("plugin-site")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--no-index", "--target", str(site), str(src)], check=True, capture_output=True, timeout=300)
    assert (site / "interp_token_count" / "__init__.py").is_file()
    eps = list(site.glob("interp_token_count-0.1.0.dist-info/entry_points.txt"))
    assert eps and "token_count = interp_token_count" in eps[0].read_text()
    return site


def run_py(site: Path | None, *args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    e = dict(os.environ, **(env or {}))
    e["PYTHONPATH"] = os.pathsep.join([str(site)] if site else []) + (os.pathsep + e["PYTHONPATH"]
                                                                      if e.get("PYTHONPATH") else "")
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=e, timeout=timeout)


def test_plugin_registers_runs_and_renders(plugin_site, tiny_model_dir, tmp_path):
    listed = run_py(plugin_site, "-m", "interp.cli", "list")
    assert listed.returncode == 0, listed.stderr
    line = next((x for x in listed.stdout.splitlines() if x.startswith("token_count ")), None)
    assert line and "Token count: the tokens of a text" in line, listed.stdout
    assert "logit_lens" in listed.stdout and "sae_features" in listed.stdout  # the built-in ones still there
    alone = run_py(None, "-m", "interp.cli", "list")  # control: without the plugin on the path, no such probe
    assert alone.returncode == 0 and "token_count" not in alone.stdout

    bad = run_py(plugin_site, "-m", "interp.cli", "run", "token_count", "--set", "text= ")
    assert bad.returncode == 2 and "text" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr

    root = tmp_path / "artifacts"
    text = "Plugins register through entry points."
    done = run_py(plugin_site, "-m", "interp.cli", "run", "token_count", "--model", str(tiny_model_dir), "--out",
                  str(root), "-q")
    assert done.returncode == 0, done.stderr[-2000:]
    run_dir = Path(done.stdout.strip().splitlines()[-1])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    from transformers import AutoTokenizer

    n = len(AutoTokenizer.from_pretrained(str(tiny_model_dir))(text)["input_ids"])
    assert manifest["status"] == "done" and manifest["metrics"]["n_tokens"] == n, manifest["metrics"]
    assert manifest["probe"] == "token_count" and run_dir.parent.name == "token_count"

    ref = f"token_count/{run_dir.name}"
    script = textwrap.dedent(f"""
        import json
        from streamlit.testing.v1 import AppTest
        import interp
        at = AppTest.from_file({str(APP)!r}, default_timeout=120)
        at.query_params["run"] = {ref!r}
        at.run()
        home = AppTest.from_file({str(APP)!r}, default_timeout=120).run()
        run = interp.load_run({str(run_dir)!r})
        html = run._repr_html_()
        print(json.dumps({{"exception": [str(e.value) for e in at.exception], "title": [t.value for t in at.title],
                          "metric": [m.value for m in at.metric], "rows": len(at.dataframe[0].value),
                          "markdown": at.markdown[0].value, "home": [t.value for t in home.title],
                          "listed": [str(r) for r in home.dataframe[0].value["run id"]],
                          "html_has_figure": "js-plotly-plot" in html or "plotly-graph-div" in html,
                          "html_names_run": {run_dir.name!r} in html}}))
    """)
    shown = run_py(plugin_site, "-c", script, env={"INTERP_OUT": str(root)})
    assert shown.returncode == 0, shown.stderr[-3000:]
    got = json.loads(shown.stdout.strip().splitlines()[-1])
    assert not got["exception"], got["exception"]
    assert got["title"] == ["token_count"], got  # ?run= opened the plugin's own page
    assert got["metric"] == [str(n)] and got["rows"] == n
    assert "example.org/token-count" in got["markdown"]
    assert got["home"] == ["Runs"] and run_dir.name in got["listed"]
    assert got["html_has_figure"] and got["html_names_run"], "the notebook display lacks the plugin's figure"


def test_a_broken_plugin_is_left_out_with_a_warning(tmp_path):
    site = tmp_path / "site"
    dist = site / "interp_broken-0.1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: interp-broken\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text("[interp.probes]\nbroken = interp_broken_missing_module\n")
    out = run_py(site, "-c", "import interp.registry as r, json; names = list(r.probes_available()); "
                 "print(json.dumps([names, r.plugin_errors()]))")
    assert out.returncode == 0, out.stderr
    names, errors = json.loads(out.stdout.strip().splitlines()[-1])
    assert "logit_lens" in names and "broken" not in names
    assert "ModuleNotFoundError" in errors["broken"] and "broken" in out.stderr
