#!/usr/bin/env bash
# Here (a machine with network access), before a GPU session: the wheels benchmarks/gpu/run.sh
# installs on the GPU machine (Python 3.12, no network), in .gpu-wheels/ (git-ignored; the `run`
# tool's carry brings it). Only torch-mlir is missing there (torch 2.11, llvmlite, cuda-bindings,
# numpy, networkx, transformers, pytest are in the image); its cp312 wheel (77 MiB) is slimmed
# below the 64 MiB carry limit by benchmarks/gpu/slim_wheel.py, which also checks from the file
# list that everything thunder imports and every library the kept extensions need is kept.
#   benchmarks/gpu/prepare_wheels.sh [PYTHON]     (default .venv/bin/python)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=${1:-$ROOT/.venv/bin/python}
DEST=$ROOT/.gpu-wheels
DL=$(mktemp -d)
trap 'rm -rf "$DL"' EXIT
platforms=()
for tag in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64; do
  platforms+=(--platform "$tag")
done
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" -d "$DL" torch-mlir==20261001
mkdir -p "$DEST"
rm -f "$DEST"/torch_mlir-*.whl
"$PY" "$ROOT/benchmarks/gpu/slim_wheel.py" "$DL"/torch_mlir-*.whl "$DEST"
# the install run.sh does, here with the GPU machine's tags: the wheel must install as it is
"$PY" -m pip install -q --no-index --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" --target "$DL/site" "$DEST"/torch_mlir-*.whl
test -f "$DL/site/torch_mlir/_mlir_libs/libTorchMLIRAggregateCAPI.so"
total=$(git -C "$ROOT" ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
wheels=$(du -cb "$DEST"/*.whl | tail -1 | cut -f1)
echo "carried: wheels $((wheels / 1048576)) MiB + tracked tree $((total / 1048576)) MiB (limit 64 MiB)"
if (( wheels + total > 60 * 1048576 )); then echo "over the carry budget" >&2; exit 1; fi
