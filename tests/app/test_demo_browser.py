"""`interp demo` serves first and fills in (issue 44): a micro-size demo with the dashboard, its Runs page polled in
headless Chromium while the runs go: a running run's stage and progress, then each run done; Ctrl-C stops both."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
from app_fixtures import ROOT
from test_app_browser import browser, free_port  # noqa: F401 - the browser fixture, shared

from interp.store import list_runs

pytestmark = [pytest.mark.browser, pytest.mark.slow]
PROBES = ("logit_lens", "patching")


def up(url: str) -> bool:
    try:
        return urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok"
    except OSError:
        return False


def test_demo_serves_first_and_shows_progress(browser, tmp_path):  # noqa: F811 - the imported fixture
    from selenium.webdriver.common.by import By

    out, port = tmp_path / "artifacts", free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    log = open(tmp_path / "demo.log", "wb")
    cmd = [sys.executable, "-m", "interp.cli", "demo", "--size", "micro", "--out", str(out), "--port", str(port),
           *PROBES]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    text = lambda: (tmp_path / "demo.log").read_text(errors="replace")  # noqa: E731
    try:
        deadline = time.monotonic() + 180
        while not up(url):
            assert proc.poll() is None, f"the demo exited: {text()[-3000:]}"
            assert time.monotonic() < deadline, f"no dashboard in 180 s: {text()[-3000:]}"
            time.sleep(0.5)
        done = [r.probe for r in list_runs(out) if r.status == "done"]
        assert len(done) < len(PROBES), f"the dashboard came up only after the runs: {done}"

        browser.get(url)
        seen, bars = set(), []
        deadline = time.monotonic() + 600
        while True:
            body = browser.find_element(By.TAG_NAME, "body").text
            seen |= {line for line in body.splitlines()  # a bar's text: probe · stage · elapsed · run id
                     if re.match(rf"({'|'.join(PROBES)}) · ", line) and len(line.split(" · ")) >= 4}
            bars += [b for b in browser.find_elements(By.CSS_SELECTOR, '[data-testid="stProgress"]')][:1]
            links = {p for p in PROBES if re.search(rf"{p} · \d{{8}}-\d{{6}}", body)}
            if links == set(PROBES):
                break
            assert proc.poll() is None, f"the demo exited: {text()[-3000:]}"
            assert time.monotonic() < deadline, f"runs not done in 600 s; seen {sorted(seen)}; {text()[-2000:]}"
            time.sleep(0.5)
        assert "Traceback" not in body, body[-2000:]
        staged = [line for line in seen if line.split(" · ")[1] != "starting"]
        assert staged, f"no running run's stage on the Runs page: {sorted(seen)}"
        assert any(re.search(r" · \d+ s", line) for line in seen), f"no elapsed time: {sorted(seen)}"
        assert bars, "no progress bar"
        browser.save_screenshot(str(tmp_path / "demo_runs.png"))

        log_text = text()
        assert re.search(r"\[1/2\] logit_lens: starting", log_text) and "[2/2] patching: done" in log_text, log_text
        assert log_text.index("dashboard: up at") < log_text.index("[2/2] patching: done"), log_text
        assert re.search(r"probe +status +seconds +headline", log_text), log_text
        assert f"dashboard: {url}" in log_text, log_text
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C: the demo and its dashboard stop
        try:
            rc = proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
            log.close()
    assert rc == 0, text()[-2000:]
    time.sleep(1)
    assert not up(url), "the dashboard outlived the demo"
