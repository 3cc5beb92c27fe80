"""Dashboard pages: `runs` (the home), `generic` (any run), and `<probe>.py` with `render(run)` per probe."""
