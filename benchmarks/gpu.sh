#!/usr/bin/env bash
# The GPU checks in one go: the GPU tests, the GPU benchmarks and the quick
# reproduction, every result into one folder. Each step has a time limit and a
# failed step does not stop the others; the limits add up to 15 minutes on a
# GPU, the worst case (never yet run on one: the CPU check below took under
# 2 minutes without the reproduction).
#
#   benchmarks/gpu.sh [OUT]                # on a machine with an NVIDIA GPU
#   benchmarks/gpu.sh --device cpu [OUT]   # the same steps on the CPU (quick
#                                          # sizes): checks the script end to end
#
# OUT defaults to benchmarks/results/gpu-<date>-<time>. It receives one log per
# step, the benchmarks' JSON, the tests' JUnit XML, nvidia-smi's report and
# summary.txt (each step's command, exit status and duration). The exit status
# is 0 only if every step succeeded.
set -uo pipefail
cd "$(dirname "$0")/.."

DEVICE=cuda
if [ "${1:-}" = "--device" ]; then DEVICE=$2; shift 2; fi
OUT=${1:-benchmarks/results/gpu-$(date +%Y%m%d-%H%M%S)}
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT"

if [ "$DEVICE" != cpu ] && ! $PY -c "import sys, torch; sys.exit(not torch.cuda.is_available())"; then
    echo "gpu.sh: torch sees no CUDA GPU. To check this script on the CPU, run" >&2
    echo "    benchmarks/gpu.sh --device cpu" >&2
    exit 2
fi
QUICK=()
SCALE=1  # the CPU check runs quick sizes, but on a slower device
if [ "$DEVICE" = cpu ]; then QUICK=(--quick); SCALE=4; fi

status=0
step() {  # step NAME SECONDS COMMAND...: run COMMAND with a time limit, log it
    local name=$1 limit=$2 start=$SECONDS rc
    shift 2
    limit=$((limit * SCALE))
    echo "== $name (limit ${limit}s): $*" | tee -a "$OUT/summary.txt"
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    rc=$?
    echo "   exit $rc after $((SECONDS - start))s" | tee -a "$OUT/summary.txt"
    tail -n 25 "$OUT/$name.log"
    [ "$rc" -eq 0 ] || status=1
}

nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || echo "no nvidia-smi" >"$OUT/nvidia-smi.txt"
step environment 60 $PY -c "import torch, skorch, sklearn, numpy
print('torch', torch.__version__, 'cuda', torch.version.cuda, 'skorch', skorch.__version__,
      'sklearn', sklearn.__version__, 'numpy', numpy.__version__)
print('GPU:', torch.cuda.get_device_name() if torch.cuda.is_available() else None)"
# Tests that need a GPU (they are skipped, and listed, without one).
step tests 90 $PY -m pytest -q -rs -p no:cacheprovider tests -k "cuda or gpu" \
    --junitxml "$OUT/tests.xml"
# Fit against the hand-written loop and skorch's loading, at a large batch.
step fit_batch4096 120 $PY benchmarks/bench_fit.py --device "$DEVICE" --batch-size 4096 \
    "${QUICK[@]}" --skip-threads --out "$OUT"
# The same at a larger and at the CPU's batch size, the two fast paths only.
step fit_batch16384 60 $PY benchmarks/bench_fit.py --device "$DEVICE" --batch-size 16384 \
    --cases "hand loop,estimator" "${QUICK[@]}" --skip-threads --out "$OUT"
step fit_batch256 90 $PY benchmarks/bench_fit.py --device "$DEVICE" --batch-size 256 \
    --quick --cases "hand loop,estimator" --skip-threads --out "$OUT"
step scaling 90 $PY benchmarks/bench_scaling.py --device "$DEVICE" --quick --out "$OUT"
# The stream drawn on the device against make_sparse_selection + the copy, stream
# fits against array fits, and a profile of the draws (kernel launches).
step stream 60 $PY benchmarks/bench_stream.py --device "$DEVICE" "${QUICK[@]}" --profile \
    --out "$OUT"
step positional 30 $PY benchmarks/bench_positional.py --device "$DEVICE" --quick --out "$OUT"
# A search's grid side by side (fit_group, exact and fused) against lone fits: on a GPU
# the lone fits of these small models are launch-bound, where a fused group is not.
step group 150 $PY benchmarks/bench_group.py --device "$DEVICE" "${QUICK[@]}" --out "$OUT"
# The quick reproduction (one seed: a timing check, not the science) with its
# fits on the GPU, one fit per CPU core in parallel, then where its time went.
SEEDS=1
step reproduce 120 $PY -m sparse_token_estimators --quick --seeds "$SEEDS" --device "$DEVICE" \
    --no-progress --out "$OUT/reproduce"
step reproduce_time 30 $PY benchmarks/bench_reproduce.py --from "$OUT/reproduce/results.json"

echo "results in $OUT (exit status $status)"
exit "$status"
