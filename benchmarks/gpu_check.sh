#!/usr/bin/env bash
# The GPU measurement in one command, on a lent GPU machine (Python 3.12, no network):
#
#   bash benchmarks/gpu_check.sh [OUT_DIR]        (OUT_DIR: $OUT there, else ./gpu-out)
#
# What it needs beside the working tree is made here by `scripts/gpu-wheels.sh` into .gpu/
# (ignored): the onnxruntime-gpu wheel unpacked, as xz parts that each fit one call, msgspec's
# wheel and real feature vectors. docs/performance.md ("Measuring on a lent GPU machine")
# says how the parts travel. Steps, each under its own
# time limit, each writing into OUT_DIR: the machine and the providers onnxruntime lists; the
# scorer bench of the MLP (CPU, CUDA plain / IO-bound / graphs, hybrid; batch 1 to 4,096; the
# per-call fixed cost of each) and of the default model (trees: CPU only); every variant against
# the CPU oracle (decisions outside the boundary band: must be 0); a catch-up of 1M rows through
# the worker's scorer, MLP and default model. Without CUDA (a CPU rehearsal) every step still runs
# on the CPU and says CUDA is absent. Exits 1 when a step failed, after running the others.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-gpu-out}}
mkdir -p "$out"
py=${PYTHON:-python3}
site=${GPU_SITE:-/tmp/fraudstream-site}
log="$out/gpu-check.log"
failed=()
exec > >(tee -a "$log") 2>&1

note() { printf '\n== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }

step() {  # step NAME SECONDS COMMAND...: run it, note its exit status, go on
    local name=$1 limit=$2
    shift 2
    note "$name"
    timeout "$limit" "$@"
    local rc=$?
    [ "$rc" -eq 0 ] || { echo "step $name: exit $rc"; failed+=("$name"); }
}

note "install"
names=$(ls /tmp/gpu-parts .gpu 2>/dev/null | grep '^ort\.tar\.xz\.part' | sort -u)
parts=()
for name in $names; do  # a part copied to /tmp/gpu-parts by an earlier call, else from .gpu/
    if [ -e "/tmp/gpu-parts/$name" ]; then parts+=("/tmp/gpu-parts/$name"); else parts+=(".gpu/$name"); fi
done
if [ ${#parts[@]} -gt 0 ]; then
    sum=$(cat "${parts[@]}" | sha256sum | cut -d' ' -f1)
    if [ -f .gpu/ort.sha256 ] && [ "$sum" != "$(cat .gpu/ort.sha256)" ]; then
        echo "the ${#parts[@]} onnxruntime-gpu parts found do not make the archive (sha256 differs)"
        failed+=(install)
    elif mkdir -p "$site" && cat "${parts[@]}" | xz -dc | tar -x -C "$site"; then
        echo "onnxruntime-gpu unpacked into $site from ${#parts[@]} parts"
    else
        echo "the onnxruntime-gpu parts did not unpack"
        failed+=(install)
    fi
else
    echo "no onnxruntime-gpu parts (.gpu/ or /tmp/gpu-parts/): the installed onnxruntime runs"
fi
for wheel in .gpu/*.whl; do
    [ -e "$wheel" ] && mkdir -p "$site" && "$py" -m zipfile -e "$wheel" "$site" && echo "unpacked $wheel"
done
export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# CUDA's and cuDNN's libraries as pip packages (nvidia/*/lib) where the machine's Python has them:
# onnxruntime's CUDA provider dlopens libcublasLt, libcudnn... by name.
nvidia_libs=$("$py" -c 'import glob, os, sys; print(":".join(sorted({os.path.dirname(p)
    for d in sys.path if d for p in glob.glob(os.path.join(d, "nvidia", "**", "lib*.so*"),
    recursive=True)})))')
[ -n "$nvidia_libs" ] && export LD_LIBRARY_PATH="$nvidia_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "nvidia library folders on LD_LIBRARY_PATH: ${nvidia_libs:-none}"

vectors=()
[ -f .gpu/vectors.npy ] && vectors=(--vectors .gpu/vectors.npy)
mlp=$(cd models && ls -d mlp-* | head -n 1)
default=$(cat models/DEFAULT)

note "machine"
(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo "no nvidia-smi") | tee "$out/gpu.txt"
"$py" - <<'EOF' | tee -a "$out/gpu.txt"
import platform, onnxruntime as ort, numpy
print(f"python {platform.python_version()}, numpy {numpy.__version__}, onnxruntime {ort.__version__} "
      f"({ort.__file__}), providers {ort.get_available_providers()}")
EOF
device=cuda
"$py" - "models/$mlp/model.onnx" <<'EOF' || device=auto
import sys
from app.scoring.scorer import OnnxScorer
try:
    OnnxScorer(sys.argv[1], device="cuda")
except RuntimeError as exc:
    print(f"CUDA absent: {exc}")
    sys.exit(1)
print("CUDA loads: the MLP runs on CUDAExecutionProvider")
EOF
echo "device for the MLP: $device" | tee -a "$out/gpu.txt"

step "scorer bench, $mlp" 240 "$py" -m benchmarks.scorer_bench --version "$mlp" --device "$device" \
    --seconds 0.5 --rounds 3 "${vectors[@]}" --json "$out/scorer-mlp.json"
step "scorer bench, $default" 90 "$py" -m benchmarks.scorer_bench --version "$default" --device auto \
    --sizes 1,64,512,4096 --seconds 0.5 --rounds 3 "${vectors[@]}" --json "$out/scorer-default.json"
step "provider agreement" 150 "$py" -m benchmarks.provider_agreement --device "$device" \
    --rows 20000 --sizes 1,7,64,255,256,1024,4096 "${vectors[@]}" --json "$out/agreement.json"
step "catch-up, $mlp" 120 "$py" -m benchmarks.catch_up_bench --version "$mlp" --device "$device" \
    --rows 1000000 --batches 512,4096 "${vectors[@]}" --json "$out/catch-up-mlp.json"
step "catch-up, $default" 120 "$py" -m benchmarks.catch_up_bench --version "$default" --device auto \
    --rows 1000000 --batches 512,4096 "${vectors[@]}" --json "$out/catch-up-default.json"

note "done"
if [ ${#failed[@]} -gt 0 ]; then
    echo "failed steps: ${failed[*]}"
    exit 1
fi
echo "every step ran; results in $out"
