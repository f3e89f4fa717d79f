# rlvr — set-up and the two front-door commands.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
PIP     := $(BIN)/pip install -c constraints.txt
STAMP   := $(VENV)/.installed

.PHONY: venv quickstart test clean

$(STAMP): pyproject.toml constraints.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(PIP) -q torch==2.13.0
	$(PIP) -q -e ".[dev,peers]"
	$(PIP) -q --no-deps "verl==0.9.1"
	touch $(STAMP)

venv: $(STAMP)

quickstart: $(STAMP)
	$(BIN)/rlvr quickstart

test: $(STAMP)
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) runs
