"""What the TransformerLens bridge this project pins needs beyond its own adapters, applied once when a model
loads (`interp.models.load_model`). tests/models checks each against the hooks that fire on a tiny model."""

from __future__ import annotations

from typing import Any


def fire_rotary_hooks(bridge: Any) -> None:
    """Make `hook_rot_q` / `hook_rot_k` fire where the bridge rotates q and k without passing them through.

    TransformerLens 3.9's attention for fused-qkv rotary families (`JointQKVPositionEmbeddingsAttentionBridge`:
    GPT-NeoX/Pythia, Phi-3, Falcon, InternLM2, Baichuan) creates both hook points but applies RoPE in its own
    `_apply_rotary_pos_emb` without calling them. On each such attention module that method is wrapped so that
    the rotated q and k ([batch, head, pos, d_head], the layout the points' conversion expects) go through the
    points right after rotation: a read sees, and an edit replaces, exactly the q/k the scores are computed from.
    A subclass that rotates in a method of its own is left alone."""
    from transformer_lens.model_bridge.generalized_components.joint_qkv_position_embeddings_attention import (
        JointQKVPositionEmbeddingsAttentionBridge as JointQKV,
    )

    for block in getattr(bridge, "blocks", []):
        attn = getattr(block, "attn", None)
        if not isinstance(attn, JointQKV) or not hasattr(attn, "hook_rot_k") or \
                type(attn)._apply_rotary_pos_emb is not JointQKV._apply_rotary_pos_emb:
            continue

        def rotate_and_fire(q, k, cos, sin, _rotate=attn._apply_rotary_pos_emb, _attn=attn):
            q, k = _rotate(q, k, cos, sin)  # (batch, head, pos, d_head)
            return _attn.hook_rot_q(q), _attn.hook_rot_k(k)

        attn._apply_rotary_pos_emb = rotate_and_fire


#: Config switches of the bridge under which its attention forward computes something other than plain attention
#: (per-head inputs or results): the bridge's own reconstruction serves every layer while one is on.
_SPLIT_SWITCHES = ("use_split_qkv_input", "use_attn_in", "use_attn_result")


def attention_on_demand(bridge: Any, family: str) -> bool:
    """Run attention as SDPA in every layer whose attention no hook reads; True when installed.

    TransformerLens's bridge reconstructs each layer's attention eagerly (q k^T, softmax, pattern @ v) so that
    `hook_attn_scores` and `hook_pattern` exist: the full [batch, head, pos, pos] matrix is built even when nothing
    reads it (the eager smollm2-135m forward is 1.32x Hugging Face's SDPA forward on this CPU, 8 x 256 tokens).
    Here each attention module checks, per call, whether any of its inner hook points (q, k, v, rotated q/k,
    scores, pattern, z) holds a forward or backward hook: if one does, that layer takes the bridge's reconstruction,
    exactly as before; otherwise it calls the Hugging Face attention it wraps, with SDPA, between the module's own
    `hook_in` and `hook_out`. So a probe that reads layer 14's pattern pays eager attention in layer 14 only.

    Exactness (tests/unit/test_attention_on_demand.py): an unhooked forward equals Hugging Face's SDPA forward bit
    for bit, and a hooked layer equals the bridge's eager reconstruction bit for bit (the SDPA config hands it a
    boolean or absent mask instead of an additive one; masked scores get exactly zero weight either way).

    Installed only where every layer's attention is the bridge's rotary reconstruction
    (`PositionEmbeddingsAttentionBridge`: Llama, Mistral, Qwen, Gemma, OLMo-2, Granite, StableLM, ...) and the family
    has an SDPA path; the others (GPT-2, GPT-NeoX, GPT-J, Phi-3's fused qkv, Gemma 2's soft-capped logits) keep the
    bridge's eager attention everywhere."""
    from transformer_lens.hook_points import HookPoint
    from transformer_lens.model_bridge.generalized_components.position_embeddings_attention import (
        PositionEmbeddingsAttentionBridge as Rotary,
    )

    from .families import NO_SDPA

    hf = getattr(bridge, "original_model", None)
    blocks = list(getattr(bridge, "blocks", []))
    attns = [getattr(b, "attn", None) for b in blocks]
    if (hf is None or family in NO_SDPA or not getattr(hf, "_supports_sdpa", False) or not attns
            or not all(type(a) is Rotary for a in attns)):
        return False
    for attn in attns:
        _install(attn, [m for name, m in attn.named_modules()
                        if isinstance(m, HookPoint) and name not in ("hook_in", "hook_out")])
    hf.config._attn_implementation = "sdpa"  # read by HF's mask builder and by each wrapped attention
    return True


def _install(attn: Any, inner: list) -> None:
    eager = attn.forward  # the bridge's reconstruction, bound

    def forward(*args: Any, **kwargs: Any) -> Any:
        cfg = attn.config
        if any(p._forward_hooks or p._backward_hooks for p in inner) or \
                any(getattr(cfg, s, False) for s in _SPLIT_SWITCHES):
            return eager(*args, **kwargs)
        if "hidden_states" in kwargs:
            hidden = kwargs.pop("hidden_states")
        else:
            hidden, args = args[0], args[1:]
        out = attn.original_component(attn.hook_in(hidden), *args, **kwargs)  # (attn_output, None) under SDPA
        return (attn.hook_out(out[0]), *out[1:])

    object.__setattr__(attn, "forward", forward)  # the component's __setattr__ would forward to the HF module
