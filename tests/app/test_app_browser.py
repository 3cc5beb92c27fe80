"""End to end: the served dashboard (streamlit run) driven by Debian's headless Chromium via selenium."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from app_fixtures import APP, ROOT

CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
pytestmark = pytest.mark.browser


def need_browser() -> None:
    missing = [p for p in (CHROMIUM, DRIVER) if not os.access(p, os.X_OK)]
    if missing:
        msg = f"{', '.join(missing)} missing: run `make browser` (apt-get install chromium chromium-driver)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(runs, tmp_path):
    """The dashboard served on 127.0.0.1 over a copy of the logit_lens micro run and the failed run."""
    root = tmp_path / "artifacts"
    for ref in (runs.done["logit_lens"], runs.failed):
        shutil.copytree(runs.root / ref, root / ref)
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(APP),
        "--server.address",
        "127.0.0.1",
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
    ]
    log = open(tmp_path / "streamlit.log", "wb")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=dict(os.environ, INTERP_OUT=str(root)), stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"streamlit did not come up: {(tmp_path / 'streamlit.log').read_text()[-2000:]}")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture
def browser(tmp_path):
    need_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1500,1100",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for_text(driver, text: str, timeout: float = 60) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, timeout, poll_frequency=0.3).until(
        lambda d: text in d.find_element(By.TAG_NAME, "body").text,
        message=f"{text!r} never appeared",
    )


def test_served_dashboard_in_chromium(runs, server, browser, tmp_path):
    from selenium.webdriver.common.by import By

    ref = runs.done["logit_lens"]
    browser.get(server)
    wait_for_text(browser, ref.partition("/")[2])  # the run's link on the Runs home (not the canvas grid)
    wait_for_text(browser, runs.failed)  # the newest run's details: the failed one
    time.sleep(1)  # let the grid paint for the screenshot
    browser.save_screenshot(str(tmp_path / "runs.png"))
    assert "Traceback" not in browser.find_element(By.TAG_NAME, "body").text

    browser.get(f"{server}/logit_lens?run={ref}")
    wait_for_text(browser, "from which layer on")
    wait_for_text(browser, "Top-k tokens by layer")
    plots = browser.find_elements(By.CSS_SELECTOR, ".js-plotly-plot")
    deadline = time.monotonic() + 30
    while len(plots) < 2 and time.monotonic() < deadline:
        time.sleep(0.3)
        plots = browser.find_elements(By.CSS_SELECTOR, ".js-plotly-plot")
    assert len(plots) == 2, "the heatmap and the by-layer plot did not render"
    time.sleep(1)
    browser.save_screenshot(str(tmp_path / "logit_lens.png"))
    assert (tmp_path / "runs.png").stat().st_size > 10_000
    print(f"screenshots: {tmp_path}")
