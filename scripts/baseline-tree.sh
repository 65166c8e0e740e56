#!/usr/bin/env bash
# A checkout of another commit, its extensions built in place, for the benchmarks' --against:
#   scripts/baseline-tree.sh 1fd15f1 /tmp/base
#   .venv/bin/python -m benchmarks.pipeline_bench --pairs 8 --no-docs --against /tmp/base
# The extensions are built as a wheel (pip's isolated build: an older tree's pyproject.toml may
# need another setuptools than .venv's) and their .so files copied into the tree.
set -euo pipefail
rev=${1:?usage: scripts/baseline-tree.sh REV DIR}
dir=${2:?usage: scripts/baseline-tree.sh REV DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
py="$root/.venv/bin/python"
if [ ! -d "$dir" ]; then
  git -C "$root" worktree add --detach "$dir" "$rev" >/dev/null
fi
wheels=$(mktemp -d)
trap 'rm -rf "$wheels"' EXIT
"$py" -m pip wheel --no-deps -q -w "$wheels" "$dir"
"$py" - "$wheels" "$dir" <<'PY'
import sys, zipfile
from pathlib import Path
wheels, tree = Path(sys.argv[1]), Path(sys.argv[2])
for wheel in wheels.glob("*.whl"):
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name.endswith(".so"):
                (tree / name).write_bytes(z.read(name))
                print(f"built {tree / name}")
PY
