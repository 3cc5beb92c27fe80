"""keystone's teacher-forced identity is exact by construction: the per-step regeneration padded to the one
pass's shape (filler after the prefix) gives bitwise the one pass's rows, in float32 and bfloat16, on the tiny
random Llama and on the embedded smollm2-135m. Controls: the filler is invisible (the real continuation in its
place gives the same rows), and a hook that leaks a later position into earlier ones makes the error > 0."""

from __future__ import annotations

import pytest
import torch

from interp import Site, intervene
from interp_probes.keystone.data import Prompt
from interp_probes.keystone.record import (
    REFERENCE,
    filler_id,
    generate,
    record_per_step,
    record_per_step_padded,
    record_teacher_forced,
    tf_check,
)

TYPES = ["fwd_up", "fwd_down", "attn_q", "attn_k", "attn_v", "attn_o"]


@pytest.fixture(scope="module")
def tiny_bf16(tiny_model_dir):
    from interp.models import load_model

    return load_model(str(tiny_model_dir), device="cpu", dtype="bfloat16")


@pytest.fixture(scope="module")
def smollm2_bf16():
    from interp.models import load_model

    return load_model("smollm2-135m", device="cpu", dtype="bfloat16")


def _gen(model, n_new: int):
    return generate(model, [Prompt(1, "p", "knowledge", "Name three colours.")], n_new, 1.1, 64, stop=False)[0]


def _assert_exact(model, n_new: int) -> None:
    gen = _gen(model, n_new)
    chk = tf_check(model, gen, n_new, TYPES)
    assert chk.reference == REFERENCE == chk.summary()["reference"]
    assert chk.max_rel_err == 0.0, chk.frame.sort_values("max_rel_err").tail()
    assert (chk.frame["max_abs_err"] == 0.0).all() and len(chk.frame) == len(TYPES) * model.info.n_layers
    for t in TYPES:
        assert chk.tf.rows[t].shape[1] == n_new
        assert torch.equal(chk.tf.rows[t], chk.step.rows[t]), t  # bitwise, not only within a tolerance
    assert chk.t_step > 0 and chk.t_tf > 0 and chk.paper_max_rel_err is None


@pytest.mark.parametrize("which", ["float32", "bfloat16"])
def test_padded_regeneration_is_bitwise_the_one_pass_tiny(tiny_model, tiny_bf16, which):
    model = tiny_model if which == "float32" else tiny_bf16
    assert next(model.hf.parameters()).dtype == getattr(torch, which)
    _assert_exact(model, 6)


@pytest.mark.parametrize("which", ["float32", "bfloat16"])
def test_padded_regeneration_is_bitwise_the_one_pass_smollm2(request, which):
    model = request.getfixturevalue("model" if which == "float32" else "smollm2_bf16")
    assert next(model.hf.parameters()).dtype == getattr(torch, which)
    _assert_exact(model, 3)


def test_the_filler_is_invisible_and_the_paper_loop_still_runs(tiny_model):
    gen = _gen(tiny_model, 5)
    filler = record_per_step_padded(tiny_model, gen, TYPES, keep_rows=True)
    real = record_per_step_padded(tiny_model, gen, TYPES, keep_rows=True, future="real")
    assert filler_id(tiny_model) not in gen.fed[gen.n_prompt :]  # the filler really differs from the continuation
    for t in TYPES:
        assert torch.equal(filler.rows[t], real.rows[t]), t  # causality: what follows position P+t-1 is not seen
    paper = record_per_step(tiny_model, gen, TYPES, keep_rows=True)  # the paper's unpadded loop, unchanged
    tf = record_teacher_forced(tiny_model, gen, TYPES, keep_rows=True)
    for t in TYPES:
        torch.testing.assert_close(paper.rows[t], tf.rows[t], rtol=1e-5, atol=1e-6)
    chk = tf_check(tiny_model, gen, 5, TYPES, paper_loop=True)
    assert chk.paper_max_rel_err is not None and chk.paper_max_rel_err <= 1e-5 and chk.t_paper > 0
    assert chk.summary()["paper_loop_max_rel_err"] == chk.paper_max_rel_err


def test_a_leak_from_the_future_breaks_the_identity(tiny_model):
    """Adding the last position's residual into every position (a non-causal edit) makes the padded steps, whose
    last position is filler, differ from the one pass, whose last position is a real token: the check fails."""
    gen = _gen(tiny_model, 5)

    def leak(x: torch.Tensor) -> torch.Tensor:  # (batch, pos, d_model)
        return x + 0.5 * x[:, -1:]

    with intervene(tiny_model, Site("resid_pre", 1), leak):
        chk = tf_check(tiny_model, gen, 5, TYPES)
    assert chk.max_rel_err > 1e-3, chk.max_rel_err
    layer1 = chk.frame[chk.frame.layer == 1]
    assert (layer1["max_rel_err"] > 0).all() and (chk.frame[chk.frame.layer == 0]["max_abs_err"] == 0).all()
    assert _exact_again(tiny_model, gen)  # the hook is gone: exact again


def _exact_again(model, gen) -> bool:
    return tf_check(model, gen, gen.n_steps, TYPES).max_rel_err == 0.0


def test_a_shape_dependent_kernel_breaks_the_paper_loop_but_not_the_padded_one(tiny_model):
    """What the GPU does (split-K and tiling chosen by shape, so other rounding at another length), emulated by an
    edit whose rounding depends on the sequence length: the unpadded loop picks it up, the padded one cannot."""
    gen = _gen(tiny_model, 5)

    def by_length(x: torch.Tensor) -> torch.Tensor:
        return x * (1 + 1e-4 * x.shape[1])

    with intervene(tiny_model, Site("resid_pre", 1), by_length):
        chk = tf_check(tiny_model, gen, 5, TYPES, paper_loop=True)
    assert chk.max_rel_err == 0.0
    assert chk.paper_max_rel_err > 1e-6, chk.paper_max_rel_err
