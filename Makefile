# rlvr — set-up and the two front-door commands:
#   make quickstart   create .venv, install, run the main job (tiny model, warm start, GRPO, plot)
#   make test         create .venv, install with test and peer extras, run the test suite
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
PIP     := $(BIN)/pip install -q -c constraints.txt

.PHONY: quickstart test install install-test clean

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

clean:
	rm -rf $(VENV) runs
