#!/usr/bin/env bash
# Remake the hand-run benchmarks under figures/bench/ at the checked-out commit: all into a scratch folder, swapped
# in only when every one has finished, so a failed or interrupted run leaves the previous ones in place. Refuses a
# tree with uncommitted changes (a committed bench must name a commit someone else can check out).
#   bash notebooks/rerun_benches.sh [NAME ...]     (default: all ten but the peers-* five; about 45 minutes on 2 cores)
# engine-t0/t1 set the engine beside its peers (transformers' forward, llama.cpp on the same GGUF: install them with
# make venv PEERS=1) on the same prompts; a later --max-new-tokens overrides the common one.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
if [ -n "$(git status --porcelain --untracked-files=no -- . ':!figures' ':!notebooks/executed')" ]; then
    echo "rerun_benches.sh: the tree has uncommitted changes; commit first" >&2; exit 2
fi
common=(--target smollm2-135m-instruct --suite mixed --max-new-tokens 48 --threads 2
        --repeats 1 --seed 0 --no-progress)
declare -A args=(
  [medusa-t0]="--methods ar,medusa,speculative:gauto,prompt-lookup:gauto --limit 12 --temperature 0 --gamma 3 --dtype auto"
  [medusa-t1]="--methods ar,medusa,speculative:gauto,prompt-lookup:gauto --limit 12 --temperature 1 --gamma 3 --dtype auto"
  [ppd-t1]="--methods ar,ppd,ppd:typical,medusa,speculative:gauto,prompt-lookup:gauto --limit 8 --temperature 1 --gamma 3 --dtype auto"
  [engine-t0]="--methods ar,speculative,prompt-lookup,eagle,medusa,hf-ar,llamacpp-ar,llamacpp-prompt-lookup --limit 8 --max-new-tokens 64 --temperature 0 --gamma 4 --dtype bf16"
  [engine-t1]="--methods ar,speculative,prompt-lookup,eagle,medusa,hf-ar,llamacpp-ar --limit 8 --max-new-tokens 64 --temperature 1 --gamma 4 --dtype bf16"
  [eagle-t0]="--methods ar,ar:fp32,speculative:gauto,prompt-lookup:gauto,medusa,ppd,eagle,eagle:fp32,eagle:shapechain --limit 8 --temperature 0 --gamma 4 --gamma-max 16 --dtype auto"
  [eagle-t1]="--methods ar,ar:fp32,speculative:gauto,prompt-lookup:gauto,medusa,ppd,eagle,eagle:fp32,eagle:shapechain --limit 8 --temperature 1 --gamma 4 --gamma-max 16 --dtype auto"
  [batch-b1]="--methods ar,prompt-lookup:g1,prompt-lookup:g4,speculative:g1,speculative:g4,medusa --limit 16 --max-new-tokens 32 --temperature 0 --gamma 4 --dtype fp32 --batch-size 1"
  [batch-b8]="--methods ar,prompt-lookup:g1,prompt-lookup:g4,speculative:g1,speculative:g4,medusa --limit 16 --max-new-tokens 32 --temperature 0 --gamma 4 --dtype fp32 --batch-size 8"
  # Every CPU peer beside ours (issue 64): llama.cpp on the GGUF and OpenVINO GenAI on the int4 IR exported from
  # the same weights (make venv models PEERS=1), on the mixed suite and on the three suites whose outputs copy their
  # input; run on a CPU with bf16 units they are the committed peers-* benches (the README names the CPU)
  [peers-t0]="--methods ar,speculative,prompt-lookup,prompt-lookup:bf16:gauto,eagle,medusa,llamacpp-ar,llamacpp-prompt-lookup,openvino-ar,openvino-prompt-lookup --limit 8 --max-new-tokens 64 --temperature 0 --gamma 4 --dtype bf16"
  [peers-t1]="--methods ar,speculative,prompt-lookup,eagle,medusa,llamacpp-ar,openvino-ar,openvino-prompt-lookup --limit 8 --max-new-tokens 64 --temperature 1 --gamma 4 --dtype bf16"
  [peers-code-edit-t0]="--methods ar,prompt-lookup,prompt-lookup:bf16:gauto,eagle,llamacpp-ar,llamacpp-prompt-lookup,openvino-ar,openvino-prompt-lookup --suite code_edit --limit 14 --max-new-tokens 64 --temperature 0 --gamma 4 --dtype bf16"
  [peers-grounded-qa-t0]="--methods ar,prompt-lookup,prompt-lookup:bf16:gauto,eagle,llamacpp-ar,llamacpp-prompt-lookup,openvino-ar,openvino-prompt-lookup --suite grounded_qa --limit 14 --max-new-tokens 64 --temperature 0 --gamma 4 --dtype bf16"
  [peers-summarize-t0]="--methods ar,prompt-lookup,prompt-lookup:bf16:gauto,eagle,llamacpp-ar,llamacpp-prompt-lookup,openvino-ar,openvino-prompt-lookup --suite summarize --limit 14 --max-new-tokens 64 --temperature 0 --gamma 4 --dtype bf16"
  [auto-vs-fixed]="--methods ar,ar:bf16,speculative:auto:gauto,prompt-lookup:auto:gauto,speculative:fp32:g1,speculative:fp32:g2,speculative:fp32:g3,speculative:fp32:g4,speculative:bf16:g1,speculative:bf16:g2,speculative:bf16:g3,speculative:bf16:g4,prompt-lookup:fp32:g2,prompt-lookup:fp32:g4,prompt-lookup:fp32:g6,prompt-lookup:bf16:g2,prompt-lookup:bf16:g4,prompt-lookup:bf16:g6,prompt-lookup:bf16:g8 --limit 12 --temperature 0 --gamma 4 --gamma-max 16 --dtype auto"
)
names=("$@"); [ ${#names[@]} -gt 0 ] || names=(engine-t0 engine-t1 eagle-t0 eagle-t1 medusa-t0 medusa-t1 ppd-t1 batch-b1
                                                batch-b8 auto-vs-fixed)
for name in "${names[@]}"; do
    [ -n "${args[$name]+x}" ] || { echo "rerun_benches.sh: no bench named $name (${!args[*]})" >&2; exit 2; }
done
scratch=$(mktemp -d "${TMPDIR:-/tmp}/specrepro-benches.XXXXXX")
# The device profile that dtype auto and gamma auto read, measured now (a cached one may come from a busier
# machine), and kept beside the auto-vs-fixed bench.
$PY -m specrepro calibrate --draft smollm2-135m-draft --threads 2 --recalibrate --out "$scratch/calibrate" \
    | tee "$scratch/calibrate.txt"
# The same bf16 step on torch's ops alone (SPECREPRO_KERNELS=off: no 4-bit/8-bit kernel, RMSNorm or attention of
# the engine's own), right after, for the side-by-side in engine-t0 (its profile is kept apart: "+off").
SPECREPRO_KERNELS=off $PY -m specrepro calibrate --dtype bf16 --threads 2 --recalibrate \
    --out "$scratch/calibrate-kernels-off" | tee "$scratch/calibrate-kernels-off.txt"
# Every bench first, into the scratch folder, so that the tree stays clean (each bench records the commit, and
# would see a swapped-in folder as an uncommitted change); then all are swapped in.
for name in "${names[@]}"; do
    echo "== $name"
    draft=()  # the draft model, for the benches that run it (bench refuses a --draft no method uses)
    [[ ${args[$name]} =~ speculative|hf-assisted ]] && draft=(--draft smollm2-135m-draft)
    # shellcheck disable=SC2086
    $PY -m specrepro bench "${common[@]}" "${draft[@]}" ${args[$name]} --out "$scratch/$name"
    if [ "$name" = auto-vs-fixed ] || [ "$name" = engine-t0 ] || [ "$name" = peers-t0 ]; then
        cp -r "$scratch/calibrate" "$scratch/$name/calibrate" && cp "$scratch/calibrate.txt" "$scratch/$name/"
    fi
    if [ "$name" = engine-t0 ] || [ "$name" = peers-t0 ]; then
        cp -r "$scratch/calibrate-kernels-off" "$scratch/$name/" && cp "$scratch/calibrate-kernels-off.txt" "$scratch/$name/"
    fi
done
for name in "${names[@]}"; do
    rm -rf "figures/bench/.old-$name"
    [ ! -d "figures/bench/$name" ] || mv "figures/bench/$name" "figures/bench/.old-$name"
    mv "$scratch/$name" "figures/bench/$name" && rm -rf "figures/bench/.old-$name"
done
rm -rf "$scratch"
