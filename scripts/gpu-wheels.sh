#!/usr/bin/env bash
# Makes .gpu/ (ignored) for benchmarks/gpu_check.sh on a GPU machine that has no network:
#   .gpu/ort.tar.xz.partNN  onnxruntime-gpu (the .venv's version, CPython 3.12) unpacked, tar + xz -9,
#                           split in parts of GPU_PART_MIB (default 56) MiB: one part per call
#   .gpu/ort.sha256         the archive's sha256 (gpu_check.sh checks the joined parts against it)
#   .gpu/msgspec-*.whl      msgspec for CPython 3.12 (the scoring path's only missing package)
#   .gpu/vectors.npy        real feature vectors (float32 [20000, F]) of a generated log
# Usage: scripts/gpu-wheels.sh        (then docs/performance.md, "Measuring on a lent GPU machine": the calls)
set -euo pipefail
cd "$(dirname "$0")/.."
part_mib=${GPU_PART_MIB:-56}
py=.venv/bin/python
version() { "$py" -c "import importlib.metadata as m; print(m.version('$1'))"; }
rm -rf .gpu
mkdir -p .gpu/dl .gpu/unpacked
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .gpu/dl \
    "onnxruntime-gpu==$(version onnxruntime-gpu)" "msgspec==$(version msgspec)"
mv .gpu/dl/msgspec-*.whl .gpu/
"$py" -m zipfile -e .gpu/dl/onnxruntime_gpu-*.whl .gpu/unpacked
# The wheel is deflate; its largest file (the CUDA provider, ~284 MB) packs far smaller under xz.
tar -C .gpu/unpacked -cf - . | xz -9 -T0 > .gpu/ort.tar.xz
sha256sum .gpu/ort.tar.xz | cut -d' ' -f1 > .gpu/ort.sha256
split -b "${part_mib}M" -d -a 2 .gpu/ort.tar.xz .gpu/ort.tar.xz.part
rm -rf .gpu/dl .gpu/unpacked .gpu/ort.tar.xz
"$py" -c "from pathlib import Path; from benchmarks.scorer_bench import load_matrix; \
load_matrix(None, 20000, Path('.gpu/vectors.npy'))"
ls -l .gpu
