"""The conversational_inertia page's CircuitsVis view (issue "One probe, one folder", item 7): it opened on an empty
grey triangle with its axis title cut to "stination Token". The view was (heads, 320, 320) with the reply's rows at
the bottom, as wide as the page, in a 640-pixel iframe: the first screen showed only the masked upper triangle,
and the fold cut the vertical "Destination Token" title. Checked in headless Chromium on the view the page builds,
inside an iframe of the page's size, without a dashboard server or a model."""

from __future__ import annotations

import html
import time

import numpy as np
import pandas as pd
import pytest

from interp_app import common
from interp_probes.conversational_inertia import figures as F

HEIGHT = 760  # the page's iframe (interp_probes/conversational_inertia/page.py: circuitsvis_rows)


def _transcript(n: int = 334, earlier: tuple[int, int] = (254, 277), reply: tuple[int, int] = (309, 332),
                heads: int = 8):
    """Stored reply rows shaped as a micro run's (smollm2-135m): most weight on the sink at position 0, a
    diagonal from the current reply to the most recent earlier reply, a little on every other key."""
    pos = np.arange(n)
    row = np.where((pos >= reply[0]) & (pos < reply[1]), pos - reply[0], -1)
    col = np.where((pos >= earlier[0]) & (pos < earlier[1]), pos - earlier[0], -1)
    tok = pd.DataFrame({"position": pos, "token": [f"t{i}" for i in pos], "row": row, "col": col})
    rows = np.zeros((heads, reply[1] - reply[0], n), dtype=np.float32)
    for r, q in enumerate(range(*reply)):
        rows[:, r, : q + 1] = 0.2 / (q + 1)
        rows[:, r, 0] += 0.7
        rows[:, r, earlier[0] + min(r, earlier[1] - earlier[0] - 1)] += 0.1
    return rows, np.array([[14, h] for h in range(heads)]), tok


def test_view_spans_the_earlier_reply_to_the_current_one():
    rows, top, tok = _transcript()
    patterns, tokens, names = F.reply_rows_view(rows, top, tok)
    assert patterns.shape == (8, 332 - 254, 332 - 254) and tokens[0] == "t254" and tokens[-1] == "t331"
    assert names[:2] == ["L14H0", "L14H1"]
    assert patterns[:, : 309 - 254].max() == 0 and patterns[:, 309 - 254 :].max() > 0, "reply rows at the bottom"


def test_view_fits_its_iframe():
    """The zoomed square, the head selector and the titles fit the iframe's height at every breakpoint."""
    for per_row, rows in ((12, 1), (6, 2), (4, 2)):
        side = common.attention_width(HEIGHT, 8, per_row)
        assert 150 + rows * (side / per_row + 6) + side <= HEIGHT and side >= 320, (per_row, side)


@pytest.mark.browser
@pytest.mark.parametrize("width", [700, 1150])
def test_first_screen_shows_the_pattern_and_the_whole_axis_title(width, tmp_path):
    """In an iframe of the page's height, the selected head's square lies wholly on the first screen (so its
    "Destination Token" title is not cut) and shows coloured cells, not only the grey mask and white."""
    from test_app_browser import CHROMIUM, DRIVER, need_browser

    need_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    rows, top, tok = _transcript()
    patterns, tokens, names = F.reply_rows_view(rows, top, tok)
    view = common.attention_html(patterns, tokens, names, HEIGHT, float(patterns.max()))
    page = tmp_path / "page.html"
    page.write_text(f'<body style="margin:0"><iframe srcdoc="{html.escape(view)}" width="{width}" '
                    f'height="{HEIGHT}" style="border:0"></iframe></body>', encoding="utf-8")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000",
                f"--user-data-dir={tmp_path / 'profile'}"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    driver.set_script_timeout(120)
    try:
        driver.get(page.as_uri())
        driver.switch_to.frame(driver.find_element(By.TAG_NAME, "iframe"))
        deadline, box = time.monotonic() + 90, None
        while box is None and time.monotonic() < deadline:
            box = driver.execute_script("""
                const cs = document.querySelectorAll('canvas');
                if (cs.length < 9) return null;
                const c = cs[cs.length - 1], r = c.getBoundingClientRect();
                const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
                let coloured = 0;
                for (let i = 0; i < d.length; i += 4) if (d[i + 2] - d[i] > 40 && d[i + 3] > 0) coloured++;
                return {top: r.top, bottom: r.bottom, left: r.left, view: window.innerHeight, coloured: coloured};
            """)
            time.sleep(0.5)
        assert box is not None, "CircuitsVis drew no zoomed head"
        assert box["left"] >= 0 and box["top"] >= 0 and box["bottom"] <= box["view"], \
            f"the zoomed head runs off the first screen of a {width} x {HEIGHT} iframe: {box}"
        assert box["coloured"] > 200, f"the first screen shows no attention: {box}"
    finally:
        driver.quit()
