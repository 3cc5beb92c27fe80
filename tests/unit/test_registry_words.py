"""A probe's words come from its registration: the summary and question from its config class docstring, the method
link from the docstring of the module that registers it."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass

import pytest

from interp.config import ProbeConfig
from interp.registry import _REGISTRY, probe, probes_available


@pytest.mark.parametrize("name", list(probes_available()))
def test_every_built_in_probe_has_a_summary_a_question_and_a_method_link(name):
    spec = probes_available()[name]
    if spec.source != "interp":
        pytest.skip("a third-party probe")
    assert spec.summary and "\n" not in spec.summary
    assert spec.question and "?" in spec.question and "  " not in spec.question
    assert spec.method and spec.method.startswith("https://") and spec.method[-1] not in ".,;:"


def _register(module_doc: str, class_doc: str):
    mod = types.ModuleType("interp_test_words_plugin", module_doc)
    sys.modules[mod.__name__] = mod
    try:
        cls = type("WordsConfig", (ProbeConfig,), {"__doc__": class_doc, "__module__": mod.__name__})
        probe("words_test", run="interp_test_words_plugin:run")(dataclass(frozen=True)(cls))
        return _REGISTRY.pop("words_test")
    finally:
        del sys.modules[mod.__name__]


def test_question_is_the_paragraph_after_the_summary_and_the_method_the_first_arxiv_id_or_url():
    spec = _register("A plugin (see https://example.org/a, then arXiv:2509.20784).",
                     """Words: a summary line.

                     What does the
                     plugin ask?

                     Further notes.""")
    assert (spec.summary, spec.question) == ("Words: a summary line.", "What does the plugin ask?")
    assert spec.method == "https://arxiv.org/abs/2509.20784"
    spec = _register("Method: https://example.org/the-paper.", "Words: only a summary.")
    assert (spec.summary, spec.question, spec.method) == ("Words: only a summary.", None, "https://example.org/the-paper")
    assert _register("", "One line.").method is None
