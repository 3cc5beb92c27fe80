"""A tiny random-weight model for tests and benchmark smoke runs (seconds, no download).

    path = tiny_model_dir(tmp / "tiny-llama")      # a local model directory
    model = load_model(str(path), device="cpu")
"""

from __future__ import annotations

from pathlib import Path


def tiny_model_dir(out: str | Path) -> Path:
    """Save a 2-layer random Llama (d_model 64, d_mlp 128, 4 heads, 2 KV heads, context 256) with
    SmolLM2's tokenizer under `out` (created), seeded so every call writes the same weights."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from .embedded import ensure_cached

    src = ensure_cached("smollm2-135m")
    tok = AutoTokenizer.from_pretrained(src)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=2)
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(0)
        hf = LlamaForCausalLM(cfg)
    finally:
        torch.random.set_rng_state(state)
    out = Path(out)
    hf.save_pretrained(out)
    tok.save_pretrained(out)
    return out
