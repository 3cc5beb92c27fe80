"""Dashboard pages: `runs` (the home), `generic` (any run) and `sweeps`; each probe's own page is the `page` module
its registration names (`interp_probes/<name>/page.py`, with `render(run)`).

What a probe asks and where its method is written up live in one place, its registration: the question is the
paragraph after the summary line of its config class docstring, the method link the first arXiv id or URL in the
docstring of the module that registers it (`ProbeSpec.question`, `ProbeSpec.method`).
`interp_app.views.generic.render_run` draws them (`common.probe_intro`) above the page's render(run); a page
never repeats them. A third-party page may still declare QUESTION and METHOD itself, or draw its own `intro`."""
