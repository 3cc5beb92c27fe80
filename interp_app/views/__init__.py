"""Dashboard pages: `runs` (the home), `generic` (any run), and `<probe>.py` with `render(run)` per probe.

A probe page declares QUESTION (the one sentence on what the probe asks) and METHOD (the link to its method);
`interp_app.views.generic.render_run` draws them above the page's render(run)."""
