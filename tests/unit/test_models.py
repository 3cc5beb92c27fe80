"""Model loading: name resolution without network, bridge parity with HF, tokens, chat."""

import pytest
import torch

from interp.errors import ModelNotFound
from interp.models import resolve_model


def test_resolution_offline(tiny_model_dir, monkeypatch):
    monkeypatch.delenv("INTERP_ONLINE", raising=False)
    assert resolve_model("smollm2-135m").source == "embedded"
    assert resolve_model(str(tiny_model_dir)).source == "local"
    for bad in ("nosuchmodel", "nobody/no-such-model-xyz", ""):
        with pytest.raises(ModelNotFound) as e:
            resolve_model(bad)
        assert "smollm2-135m" in str(e.value) and "\n" not in str(e.value)


def test_tiny_model_loads_from_a_directory(tiny_model):
    assert tiny_model.info.n_layers == 2 and tiny_model.info.source == "local"


@pytest.mark.slow
def test_bridge_logits_equal_hf_eager(model):
    from transformers import AutoModelForCausalLM

    from interp.embedded import model_cache_dir

    ref = AutoModelForCausalLM.from_pretrained(model_cache_dir("smollm2-135m"), attn_implementation="eager",
                                               dtype=torch.float32).eval()
    enc = model.tokenize(["The capital of France is", "Mechanistic interpretability studies circuits in models."],
                         padding_side="left")
    with torch.no_grad():
        ours = model.forward(enc["input_ids"], enc["attention_mask"])
        theirs = ref(**enc).logits
    m = enc["attention_mask"].bool()
    err = (ours[m] - theirs[m]).abs().max().item()
    assert err <= 1e-4, f"bridge vs HF eager max |diff| {err:.2e}"


@pytest.mark.slow
def test_smollm2_tokens_and_chat(model):
    ids = model.tokenize("The capital of France is")["input_ids"][0].tolist()
    assert ids[0] != model.tokenizer.convert_tokens_to_ids("<|im_start|>"), "SmolLM2 must get no BOS"
    assert model.info.chat
    text = model.chat_text("Hi", system="")
    assert text.startswith("<|im_start|>system\n<|im_end|>") and text.endswith("<|im_start|>assistant\n")
    assert "You are a helpful AI assistant" in model.chat_text("Hi")


@pytest.mark.slow
def test_greedy_fast_path_equals_hooked_path(model):
    from interp.generate import greedy, windowed_repetition_penalty

    prompts = ["Hi there, how", "The capital of France is"]
    fn = windowed_repetition_penalty(1.1, 64)
    fast = greedy(model, prompts, 10, logits_fn=fn)
    slow = greedy(model, prompts, 10, logits_fn=fn, hooked=True)
    assert fast == slow
    assert model.tokenizer.decode(fast[1]).startswith(" Paris")
