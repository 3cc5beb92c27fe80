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


@pytest.fixture(scope="module")
def server(runs, tmp_path_factory):
    """The dashboard served on 127.0.0.1 over copies of the logit_lens micro run, the failed run and the micro runs
    of the pages with CircuitsVis views and of the feature dashboard."""
    tmp_path = tmp_path_factory.mktemp("served")  # one server for the module's tests (start-up is ~15 s here)
    root = tmp_path / "artifacts"
    extra = [runs.done[p] for p in ("sae_features", "conversational_inertia", "graph_sawtooth", "patching", "circuits")
             if p in runs.done]
    for ref in (runs.done["logit_lens"], runs.failed, *extra):
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
    ]  # no --client.toolbarMode: the repository's .streamlit/config.toml (cwd) sets the viewer toolbar
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


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    need_browser()
    tmp_path = tmp_path_factory.mktemp("chromium")
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
        # the network off: every host but the loopback resolves to nothing, and a dead proxy for the rest
        "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
        "--proxy-server=http://127.0.0.1:9",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    # a busy 2-core machine can keep the page's main thread (CircuitsVis, plotly) past selenium's 30 s script default
    driver.set_script_timeout(180)
    driver.set_page_load_timeout(180)
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


def wait_for(driver, css: str, n: int = 1, timeout: float = 60):
    """The elements matching `css` once there are at least `n` of them (or all there are at the timeout)."""
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + timeout
    while True:
        found = driver.find_elements(By.CSS_SELECTOR, css)
        if len(found) >= n or time.monotonic() > deadline:
            return found
        time.sleep(0.3)


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
    plots = wait_for(browser, ".js-plotly-plot", 2, timeout=30)
    assert len(plots) == 2, "the heatmap and the by-layer plot did not render"
    time.sleep(1)
    browser.save_screenshot(str(tmp_path / "logit_lens.png"))
    assert (tmp_path / "runs.png").stat().st_size > 10_000
    print(f"screenshots: {tmp_path}")


def external_requests(driver, server: str) -> list[str]:
    """URLs the current document (and its frames, by the caller) fetched from anywhere but the server."""
    urls = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    return [u for u in urls if not u.startswith((server, "data:", "blob:", "about:"))]


def test_new_pages_in_chromium_with_the_network_off(runs, server, browser, tmp_path):
    from selenium.webdriver.common.by import By

    browser.get(f"{server}/runs")  # /runs opens the Runs page
    wait_for_text(browser, runs.failed)
    body = browser.find_element(By.TAG_NAME, "body").text
    assert "Page not found" not in body and "Runs" in body
    assert not [b for b in browser.find_elements(By.TAG_NAME, "button") if b.text.strip() == "Deploy"], \
        "the Deploy button is shown (toolbarMode should be viewer)"
    assert not browser.find_elements(By.CSS_SELECTOR, '[data-testid="stAppDeployButton"]')

    for probe in ("sae_features", "conversational_inertia", "graph_sawtooth"):
        assert probe in runs.done, f"the {probe} micro run failed: {runs.errors.get(probe)}"
    feats = runs.root / runs.done["sae_features"]
    import pandas as pd

    table = pd.read_parquet(feats / "features.parquet")
    token = table[table["top_token_share"] >= 0.8].sort_values("n_fired", ascending=False)["top_token"].iloc[0]
    browser.get(f"{server}/sae_features?run={runs.done['sae_features']}&token={token.strip()}")
    wait_for_text(browser, "Top-activating contexts")
    centers = wait_for(browser, "span.tok.center", 3)
    shown = [c.get_attribute("textContent") for c in centers]
    assert shown and sum(t.strip() == token.strip() for t in shown) >= 0.8 * len(shown), (token, shown[:10])
    assert len(wait_for(browser, ".js-plotly-plot", 3)) >= 3, "the density, histogram and logit plots"
    assert not external_requests(browser, server)
    browser.save_screenshot(str(tmp_path / "sae_features.png"))

    for probe in ("conversational_inertia", "graph_sawtooth"):
        browser.get(f"{server}/{probe}?run={runs.done[probe]}")
        wait_for_text(browser, "CircuitsVis")
        frames = wait_for(browser, "iframe", 1)
        assert frames, f"no CircuitsVis iframe on the {probe} page"
        assert not external_requests(browser, server)
        browser.switch_to.frame(frames[-1])
        try:
            wait_for_text(browser, "Head Selector")  # drawn by CircuitsVis's own script, inline
            heads = [h.text for h in browser.find_elements(By.TAG_NAME, "h4")]
            assert any(h.startswith("L") and "H" in h for h in heads), heads[:5]
            assert not external_requests(browser, server), "the CircuitsVis view fetched something"
        finally:
            browser.switch_to.default_content()
        browser.save_screenshot(str(tmp_path / f"{probe}.png"))


def test_patching_page_in_chromium(runs, server, browser, tmp_path):
    from selenium.webdriver.common.by import By

    if "patching" not in runs.done:
        pytest.skip("$INTERP_TEST_PROBES leaves out patching")
    browser.get(f"{server}/patching?run={runs.done['patching']}")
    wait_for_text(browser, "Top components")
    wait_for_text(browser, "activation patching")
    plots = wait_for(browser, ".js-plotly-plot", 3, timeout=30)
    assert len(plots) == 3, "the two heatmaps and the agreement scatter did not render"
    assert "Traceback" not in browser.find_element(By.TAG_NAME, "body").text
    time.sleep(1)
    browser.save_screenshot(str(tmp_path / "patching.png"))
    assert (tmp_path / "patching.png").stat().st_size > 10_000


def test_circuits_click_on_a_feature_shows_its_contexts(runs, server, browser, tmp_path):
    """Clicking a feature's marker on the circuits graph selects it: the feature box names it and shows its contexts
    (issue 44: a keyed selectbox ignored the click's new index)."""
    import re

    import pandas as pd
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    from interp_probes.circuits.figures import shown

    if "circuits" not in runs.done:
        pytest.skip("$INTERP_TEST_PROBES leaves out circuits")
    assert "circuits" not in runs.errors, runs.errors.get("circuits")
    ref = runs.done["circuits"]
    ctx = pd.read_parquet(runs.root / ref / "feature_contexts.parquet")
    browser.get(f"{server}/circuits?run={ref}")
    wait_for_text(browser, "Attribution graph")
    wait_for_text(browser, "Top held-out contexts")
    graph = wait_for(browser, ".js-plotly-plot", 1)[0]  # the first plot on the page
    deadline = time.monotonic() + 60
    while not browser.execute_script("return !!(arguments[0]._fullData && arguments[0]._fullData.length)", graph):
        assert time.monotonic() < deadline, "the graph never drew"
        time.sleep(0.3)
    names = browser.execute_script("return arguments[0]._fullData.map(t => t.name)", graph)
    k = names.index("feature")
    hover = browser.execute_script(f"return arguments[0]._fullData[{k}].hovertext", graph)
    before = re.search(r"Feature (\d+) in layer (\d+)", browser.find_element(By.TAG_NAME, "body").text).groups()
    fired = {(int(r.layer), int(r.feature)) for r in ctx.itertuples()}
    picks = [(j, int(m[2]), int(m[1])) for j, h in enumerate(hover)
             if (m := re.match(r"feature (\d+) in layer (\d+)", h)) and (int(m[2]), int(m[1])) in fired
             and (m[1], m[2]) != before]
    assert picks, f"no other feature of the graph fires on held-out text ({len(hover)} features)"
    j, layer, feature = picks[0]
    points = browser.find_elements(By.CSS_SELECTOR, ".js-plotly-plot g.scatterlayer g.trace")[k].find_elements(
        By.CSS_SELECTOR, "path.point")
    ActionChains(browser).move_to_element(points[j]).click().perform()
    wait_for_text(browser, f"Feature {feature} in layer {layer}", timeout=120)  # a rerun on a busy machine
    want = ctx[(ctx.layer == layer) & (ctx.feature == feature)].sort_values("rank")
    kept = wait_for(browser, ".circuits-contexts span.tok.kept", len(want))
    deadline = time.monotonic() + 60
    while [e.get_attribute("textContent") for e in kept] != [shown(t[a]) for t, a in zip(want.tokens, want["at"])]:
        assert time.monotonic() < deadline, ([e.get_attribute("textContent") for e in kept], want.tokens.tolist())
        time.sleep(0.5)
        kept = browser.find_elements(By.CSS_SELECTOR, ".circuits-contexts span.tok.kept")
    text = browser.find_element(By.CSS_SELECTOR, ".circuits-contexts").text
    assert "▁" not in text and "Ġ" not in text, text[:200]
    boxes = [b.get_attribute("textContent") + " ".join(i.get_attribute("value") or "" for i in
                                                       b.find_elements(By.TAG_NAME, "input"))
             for b in browser.find_elements(By.CSS_SELECTOR, '[data-testid="stSelectbox"]')]
    assert any(f"feature {feature} in layer {layer}" in b for b in boxes), boxes
    assert "Traceback" not in browser.find_element(By.TAG_NAME, "body").text
    browser.save_screenshot(str(tmp_path / "circuits.png"))
