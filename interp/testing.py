"""A tiny random-weight model for tests and benchmark smoke runs (seconds, no download).

    path = tiny_model_dir(tmp / "tiny-llama")      # a local model directory
    model = load_model(str(path), device="cpu")
"""

from __future__ import annotations

from pathlib import Path


def tiny_model_dir(out: str | Path) -> Path:
    """Save a 2-layer random Llama (d_model 64, d_mlp 128, 4 heads, 2 KV heads, context 256) with
    SmolLM2's tokenizer under `out` (created), seeded so every call writes the same weights."""
    from transformers import LlamaConfig

    tok = _tokenizer()
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=2)
    return _save_seeded(cfg, tok, Path(out), seed=0)


def _tokenizer():
    from transformers import AutoTokenizer

    from .embedded import ensure_cached

    return AutoTokenizer.from_pretrained(ensure_cached("smollm2-135m"))


def _save_seeded(cfg, tok, out: Path, seed: int) -> Path:
    """A random model of `cfg`, built under torch seed `seed` (the global RNG restored after), saved with `tok`."""
    import torch
    from transformers import AutoModelForCausalLM

    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        hf = AutoModelForCausalLM.from_config(cfg)
    finally:
        torch.random.set_rng_state(state)
    hf.save_pretrained(out)
    tok.save_pretrained(out)
    return out


#: Tiny-model settings per Hugging Face `model_type` (the families the coverage matrix runs): 4 layers,
#: d_model 128, 4 heads (2 KV heads where the family has GQA), d_mlp 256, context 512.
_COMMON = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=512)
FAMILIES: dict[str, dict] = {
    "llama": _COMMON,
    "mistral": {**_COMMON, "sliding_window": 256},
    "qwen2": _COMMON,
    "qwen3": {**_COMMON, "head_dim": 32},
    "gemma": {**_COMMON, "head_dim": 32},
    "gemma2": {**_COMMON, "head_dim": 32, "sliding_window": 256},
    "gemma3_text": {**_COMMON, "head_dim": 32, "sliding_window": 256},
    "phi3": {**_COMMON, "num_key_value_heads": 4},
    "olmo2": _COMMON,
    "granite": _COMMON,
    "stablelm": {**_COMMON, "num_key_value_heads": 4},
    "gpt2": dict(n_embd=128, n_inner=256, n_layer=4, n_head=4, n_positions=512),
    "gpt_neox": dict(hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
                     max_position_embeddings=512),
    "gptj": dict(n_embd=128, n_inner=256, n_layer=4, n_head=4, n_positions=512, rotary_dim=16),
}


def tiny_family_dir(family: str, out: str | Path, seed: int = 0) -> Path:
    """Save a tiny random model of HF `model_type` `family` (see FAMILIES) with SmolLM2's tokenizer under `out`,
    built in-process from its config (`AutoConfig.for_model`), no download; seeded."""
    from transformers import AutoConfig

    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")
    tok = _tokenizer()
    ids = dict(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    cfg = AutoConfig.for_model(family, vocab_size=len(tok), tie_word_embeddings=True, **ids, **FAMILIES[family])
    return _save_seeded(cfg, tok, Path(out), seed)
