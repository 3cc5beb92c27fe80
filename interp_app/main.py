"""The interp dashboard: `streamlit run interp_app/main.py` (or `interp app`), reading runs under $INTERP_OUT.

Navigation comes from the registry: the Runs home (also at /runs), the Sweeps page (`interp_app.views.sweeps`, whose
points link to their runs as the home page does), then one page per registered probe, built-in or from a plugin's
`interp.probes` entry point (its page module's `render(run)`, or the generic page). The toolbar is the viewer's
(no "Deploy" button). Every page reads only inside the artifacts root, through the store.
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import interp_app  # noqa: F401 - installed (pip install -e .)
except ImportError:  # run from a checkout without installing: the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import streamlit as st

from interp.registry import probes_available
from interp_app import common
from interp_app.views import generic
from interp_app.views import runs as runs_view
from interp_app.views import sweeps as sweeps_view


def _page(fn, title: str, url_path: str, **kw) -> st.Page:
    fn.__name__ = f"page_{url_path or 'home'}"
    return st.Page(fn, title=title, url_path=url_path, **kw)


def main() -> None:
    # an emoji icon: a :material/...: page icon makes the browser fetch its SVG from a font CDN (offline: an error)
    st.set_page_config(page_title="interp", page_icon="🔬", layout="wide")
    # no "Deploy" button or developer menu: set by .streamlit/config.toml (from the repository root) and by
    # `interp app`'s --client.toolbarMode flag (from anywhere); here too for later sessions of a bare `streamlit run`
    st.set_option("client.toolbarMode", "viewer")
    root = common.artifacts_root()
    specs = probes_available()
    probe_pages = {
        name: _page(lambda name=name: generic.probe_page(name, root), name, name, icon=":material/science:")
        for name in specs
    }
    sweeps = _page(lambda: sweeps_view.render(root, probe_pages), "Sweeps", "sweeps", icon=":material/grid_view:")
    home = _page(lambda: runs_view.render(root, probe_pages, sweeps), "Runs", "home", default=True,
                 icon=":material/table:")
    # /runs opens the same page (the default page itself always lives at /); hidden from the menu
    runs_alias = _page(lambda: runs_view.render(root, probe_pages, sweeps), "Runs", "runs", visibility="hidden")
    st.navigation({"": [home, sweeps, runs_alias], "Probes": list(probe_pages.values())}).run()


main()
