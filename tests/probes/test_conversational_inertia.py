"""conversational_inertia, quick size on the embedded model: the diagonal signature against its null
and the control transcripts, and Long-context repetition against Window(2) and Short."""

from __future__ import annotations

import json

import numpy as np


def test_diagonal_attention_beats_the_null_and_the_control(quick):
    m = quick.metrics
    assert m["max_diag_z"] >= 6, f"max diagonal z {m['max_diag_z']:.1f} < 6"
    assert m["max_diag_z_control"] < m["max_diag_z"], (
        f"control transcripts (no index alignment) z {m['max_diag_z_control']:.1f} vs aligned {m['max_diag_z']:.1f}")
    assert m["n_inertia_heads"] >= 1 and m["null_calibration_within_3"] >= 95, m["null_calibration_within_3"]
    heads = quick.table("heads")
    assert len(heads) == quick.manifest["model"]["n_layers"] * quick.manifest["model"]["n_heads"]
    assert heads.is_inertia_head.sum() == m["n_inertia_heads"]


def test_long_context_repeats_the_locked_door_more_than_window(quick):
    m = quick.metrics
    assert m["repeat_rate_long"] > m["repeat_rate_window"], (
        f"repeat rate Long {m['repeat_rate_long']:.2f} vs Window(2) {m['repeat_rate_window']:.2f}")
    assert m["repeat_rate_long"] >= m["repeat_rate_short"], (
        f"repeat rate Long {m['repeat_rate_long']:.2f} vs Short {m['repeat_rate_short']:.2f}")
    assert m["unparsed_rate_long"] <= 0.3 and m["unparsed_rate_window"] <= 0.3, m
    rows = quick.table("behavior")
    assert set(rows.policy) == {"long", "window", "short"} and (rows.N == 8).all()
    tokens = rows.groupby("policy").context_tokens.mean()
    assert tokens["long"] > 2 * tokens["window"] > tokens["short"], tokens.to_dict()


def test_shares_and_pairs_are_well_formed(quick):
    m = quick.metrics
    assert m["share_sum_max_err"] < 1e-4 and m["pattern_row_sum_max_err"] < 1e-4
    shares = quick.table("segment_shares")
    part = shares[shares.segment.isin(["system", "user", "prev_assistant", "self", "other"])]
    sums = part.groupby(["transcript_id", "layer"]).share.sum()
    assert np.allclose(sums, 1, atol=1e-4)
    pairs = quick.jsonl("cpl_pairs")
    assert len(pairs) == m["n_cpl_pairs"] == len(quick.table("cpl_pairs"))
    for p in pairs:
        assert p["chosen"][0]["content"] != p["rejected"][0]["content"]
        assert p["prompt"][0]["role"] == "system" and p["prompt"][-1]["role"] == "user"
        assert len(p["prompt"]) == 2 + 2 * p["N"], "the prompt is the Long context"
    spans = json.loads(quick.table("transcripts").spans.iloc[0])
    assert [s["role"] for s in spans][:3] == ["system", "user", "assistant"]
