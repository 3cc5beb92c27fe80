"""sae_falsification quick size on the embedded model: injecting a feature's top tokens switches it on more often
than injecting frequency-matched random tokens (same strategies, same max over strategies), with the hygiene and
loop mechanics intact; and the loop end to end with the endpoint generator against a loopback stand-in server."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from interp.runner import execute, prepare
from interp.store import load_run
from interp_probes.sae_falsification.checks import FN_FLAGS, FP_FLAGS


def test_top_tokens_switch_features_on_more_than_matched_random_tokens(quick):
    m = quick.metrics
    real, ctrl = m["frac_token_driven"], m["frac_token_driven_control"]
    assert real > ctrl, (f"token-driven {real:.2f} vs frequency-matched control {ctrl:.2f} over "
                         f"{m['n_analysed_injection']} features ({m['n_candidates']} candidates)")
    inj = quick.table("injection")
    assert set(inj.strategy) == {"prepend", "bigram_before"} or set(inj.strategy) == {"prepend"}
    assert set(inj.arm) == {"real", "control", "alt"} and m["n_analysed_injection"] == 6
    assert m["frac_token_driven_reference_payload"] == real and m["frac_token_driven_top_payload"] is not None
    assert m["injection_position_violations"] == 0


def test_hygiene_detection_and_loop_mechanics(quick):
    m = quick.metrics
    assert m["sae_hook_matches_config"] and m["sae_hook_name"] == "blocks.9.hook_resid_post"
    assert m["sae_roundtrip_ok"], m["sae_roundtrip_err"]
    assert m["n_candidates"] >= 1 and not m["candidates_unfiltered"]
    assert 0.5 <= m["digit_oracle_auc"] <= 0.85, m["digit_oracle_auc"]
    det = quick.table("detection")
    assert len(det) == m["sae_d_sae"] and det.passed.sum() == m["n_candidates"]
    cand = quick.table("candidates")
    assert len(cand) and cand.iteration.max() <= quick.config["loop_max_iters"]
    for kind, flags in (("FP", FP_FLAGS), ("FN", FN_FLAGS)):
        sub = cand[cand.kind == kind]
        assert sub[list(flags)].notna().all().all(), f"{kind} rows lack validity flags"
    assert "frac_falsified" in m and "n_genuine" in m and m["steer_applied_ok"]
    assert "seconds_injection" in quick.timings and "seconds_injection" not in m
    contexts = quick.table("top_contexts")
    assert all(a[0] == 0.0 for a in contexts.acts), "position 0 carried an activation"


class _Stub(BaseHTTPRequestHandler):
    seen: list = []

    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append(self.path)
        user = body["messages"][-1]["content"]
        if "Return a JSON list" in user:
            reply = json.dumps(["On Sunday the village band played by the river while children fed the ducks and "
                                "their parents talked about the new bakery on the corner of the square."] * 2)
        elif "step-by-step reasoning" in user:
            reply = "no"
        elif "same problem" in user:
            reply = "same meaning"
        elif "Rewrite it so" in user:
            reply = user.split("\n\n")[1].replace("answer is", "result is")
        elif "In one sentence" in user:
            reply = "Fires on arithmetic steps."
        else:
            reply = '{"interpretation": "x", "confidence": 0.5, "is_genuine_reasoning_feature": false}'
        data = json.dumps({"choices": [{"message": {"content": reply}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_loop_with_an_openai_compatible_endpoint(model, tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        spec, cfg = prepare("sae_falsification", {"size": "micro", "generator": "openai", "generator_url": url,
                                                  "generator_model": "stub"})
        run = load_run(execute(spec, cfg, out=tmp_path, model=model, progress=False))
    finally:
        server.shutdown()
        thread.join()
    assert set(_Stub.seen) == {"/v1/chat/completions"}
    cand, hyp = run.table("candidates"), run.table("hypotheses")
    assert (cand.source == "openai").any() and cand.ok_judge.notna().any()
    assert hyp.generator.iat[0] == "openai" and hyp.hypothesis.iat[0] == "Fires on arithmetic steps."
    assert run.metrics["generator_backend"] == "openai"
    assert len(run.jsonl("generator_log")) == len(_Stub.seen)
    feats = run.table("features")
    loop = feats[feats.loop_status.isin(["analysed", "forced"])]
    assert (loop.judge_genuine == False).all()  # noqa: E712 - the stub's verdict
