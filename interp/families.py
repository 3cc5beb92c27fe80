"""What differs between decoder families before any weights load (torch-free): the facts the pre-load checks
and the hooks need, keyed by Hugging Face `model_type`. `interp.anatomy` finds the modules themselves.

The tables are facts about the TransformerLens bridge this project pins, held true by tests/models (the
coverage matrix checks each against which hooks actually fire on a tiny model of the family).
"""

from __future__ import annotations

NO_ROTARY = frozenset({"gpt2", "gpt_bigcode", "opt", "bloom", "mpt"})
"""Families with learned or ALiBi positions: their q/k carry no rotation, so attn_q/k *are* the rotated q/k."""

INTERLEAVED_ROTARY = frozenset({"gptj", "codegen"})
"""Rotary families that rotate adjacent dimensions (2i, 2i + 1) together (GPT-J's `rotate_every_two`); the others
rotate dimension i with i + r/2 of the first r rotated dimensions (`rotate_half`)."""

BRIDGE_HIDES_ROTARY = frozenset({"gptj"})
"""Rotary families whose bridge adapter rotates q/k inside the attention without firing hook_rot_q/k: GPT-J's
runs Hugging Face's attention, which rotates inside its forward. (GPT-NeoX, Phi-3 and the other fused-qkv families
rotate in the bridge's own method, which `interp.models` makes fire the points.)"""

NOT_GATED = frozenset({"gpt2", "gpt_neox", "gptj", "gpt_bigcode", "opt", "bloom", "falcon", "mpt", "codegen",
                       "phi", "stablelm_epoch"})
"""Families whose MLP is up -> act -> down with no gate (mlp_up does not exist; mlp_gate is the up output)."""

PARALLEL = frozenset({"gptj", "cohere", "cohere2", "codegen", "phi", "falcon"})
"""Families whose attention and MLP read the same block input (GPT-NeoX too, by its use_parallel_residual flag,
on by default)."""

NO_SDPA = frozenset({"gemma2"})
"""Families whose HF attention has no SDPA path here (soft-capped attention logits): decoding runs eager."""

ENCODER_ONLY = frozenset({"bert", "roberta", "distilbert", "albert", "electra", "deberta", "deberta-v2", "xlm-roberta",
                          "camembert", "mpnet", "t5", "bart", "mt5", "longt5", "m2m_100", "marian", "pegasus", "led"})
"""Model types that are not decoder-only causal LMs (encoders and encoder-decoders)."""

ROTARY_KINDS = ("attn_rot_q", "attn_rot_k")


def site_fallback(kind: str, family: str) -> tuple[str, str] | None:
    """(kind served instead, why) when `family` cannot serve site `kind` itself, else None.

    attn_rot_q/k fall back to attn_q/k: exactly where there is no rotary embedding, and as pre-rotation q/k
    where the bridge hides the rotation (a probe that needs the rotated values says so: ProbeConfig.NEEDS_EXACT)."""
    if kind in ROTARY_KINDS:
        if family in NO_ROTARY:
            return kind.replace("_rot", ""), "no rotary embedding: the unrotated q/k are exact"
        if family in BRIDGE_HIDES_ROTARY:
            return kind.replace("_rot", ""), "the bridge hides the rotation: pre-rotation q/k"
    return None


def unsupported(kind: str, family: str) -> str | None:
    """Why `family` cannot serve site `kind` exactly (None: it can, possibly through an exact fallback)."""
    if kind == "mlp_up" and family in NOT_GATED:
        return "needs a gated MLP (up_proj beside gate_proj); this family's MLP is not gated"
    if kind == "resid_mid" and family in PARALLEL | {"gpt_neox"}:
        return "needs a sequential block; this family runs attention and MLP in parallel"
    fb = site_fallback(kind, family)
    if fb is not None and family in BRIDGE_HIDES_ROTARY:
        return "needs the rotated q/k; the TransformerLens bridge does not expose them for this family"
    return None
