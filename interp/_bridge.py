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
