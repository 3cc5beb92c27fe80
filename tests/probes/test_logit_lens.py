"""logit_lens on the embedded model: the answer emerges late, and only for its own prompt."""

from interp.runner import execute, prepare
from interp.store import load_run


def run(model, tmp_path, **over):
    spec, cfg = prepare("logit_lens", over)
    return load_run(execute(spec, cfg, out=tmp_path, model=model, progress=False))


def test_paris_emerges_in_late_layers(model, tmp_path):
    r = run(model, tmp_path, prompt="The capital of France is")
    m = r.metrics
    assert m["final_top1"] == " Paris"
    ranks = m["final_rank_by_layer"]
    first = m["first_layer_final_top1"]
    assert ranks[-1] == 0 and first >= model.info.n_layers // 2, f"first layer with ' Paris' on top: {first}"
    early = sorted(ranks[: model.info.n_layers // 3])[len(ranks) // 6]
    assert early > 100, f"early layers already rank ' Paris' at {early}: the lens would be trivial"
    lens = r.tensor_file("lens")
    assert lens["topk_ids"].shape == (model.info.n_layers, m["n_tokens"], 5)


def test_chat_template_changes_the_input(model, tmp_path):
    plain = run(model, tmp_path, prompt="Name the capital of France.")
    chat = run(model, tmp_path, prompt="Name the capital of France.", chat=True)
    assert chat.metrics["n_tokens"] > plain.metrics["n_tokens"] + 10
    tokens = list(chat.table("tokens")["token"])
    assert tokens[0] == "<|im_start|>"
