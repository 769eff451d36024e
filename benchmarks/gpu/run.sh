#!/usr/bin/env bash
# One device run of the CUDA path (docs/cuda.md, "The device script"): sized for 7 minutes at most on an
# H100, every output under $OUT (the `run` tool's folder; default .gpu-out/ here).
#
#   benchmarks/gpu/run.sh             on a GPU machine: needs .gpu-wheels/ (benchmarks/gpu/prepare_wheels.sh)
#   benchmarks/gpu/run.sh --dry-run   here, on the CPU (tests/test_gpu_script.py): the same steps,
#                                     tiny sizes, kernels as the CPU's, under a minute
#
# Steps: install torch-mlir from the carried slimmed wheel (pip --no-index --no-deps --target) and
# put thunder on the path through a folder of links (the package-dir mapping of pyproject.toml:
# thunder.dialects -> dialects/, thunder.lowering -> lowering/, thunder.tools -> tools/; nothing to
# build, no setuptools needed), then four parts, each a Python script under its own timeout
# writing $OUT/<part>.json (so one failure or timeout loses nothing else), all output into
# $OUT/run.log, and $OUT/summary.md at the end (7 files: the tool brings back 8 at most).
#   ops     (a) the op test files on CUDA with the cuda executor; values + grads, f32 and bf16
#   models  (b) transformers GPT-2 / Llama, nanoGPT, a CNN: forward + training step against eager
#   bench   (c) benchmarks/fusion.py's cases and GPT / Llama block training steps, bf16 and f32,
#               against eager and torch.compile; bandwidth as a fraction of a device copy's
#   graphs  (d) CUDA graphs capture of a jitted decode step
#   hotspots (e) where the GPT block's bf16 step and a large cross-entropy spend their time: traces
#               and torch.profiler's top ops (last: the other parts' figures come first)
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DRY=0
for arg in "$@"; do
  case $arg in
    --dry-run) DRY=1 ;;
    *) echo "usage: $0 [--dry-run]" >&2; exit 2 ;;
  esac
done
OUT=${OUT:-$ROOT/.gpu-out}
mkdir -p "$OUT"
if [[ -z ${PYTHON:-} ]]; then
  if [[ $DRY == 1 && -x $ROOT/.venv/bin/python ]]; then PYTHON=$ROOT/.venv/bin/python; else PYTHON=python3; fi
fi
WORK=$(mktemp -d /tmp/thunder-gpu-run.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
exec > >(tee "$OUT/run.log") 2>&1
TEE=$!
START=$SECONDS
echo "== thunder device run: $(date -u +%FT%TZ), dry run: $DRY, python: $PYTHON, out: $OUT"

# ---- install what the machine lacks
if [[ $DRY == 0 ]]; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  shopt -s nullglob
  wheels=("$ROOT"/.gpu-wheels/*.whl)
  if (( ${#wheels[@]} == 0 )); then
    echo "no wheels in .gpu-wheels/: run benchmarks/gpu/prepare_wheels.sh here and carry .gpu-wheels" >&2
    exit 1
  fi
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$WORK/site" "${wheels[@]}" || exit 1
  export PYTHONPATH=$WORK/site
fi
# thunder by path: a package folder of links with pyproject.toml's package-dir mapping
mkdir -p "$WORK/shim/thunder"
for f in "$ROOT"/thunder/*; do ln -s "$f" "$WORK/shim/thunder/"; done
"$PYTHON" - "$ROOT/pyproject.toml" "$WORK/shim" <<'PY' || exit 1
import os, sys, tomllib  # noqa: E401
dirs = tomllib.load(open(sys.argv[1], "rb"))["tool"]["setuptools"]["package-dir"]
for package, folder in dirs.items():
    if package.count(".") == 1:  # thunder.dialects -> dialects/, ...
        os.symlink(os.path.join(os.path.dirname(sys.argv[1]), folder), os.path.join(sys.argv[2], *package.split(".")))
PY
export PYTHONPATH=$WORK/shim${PYTHONPATH:+:$PYTHONPATH}
export THUNDER_KERNEL_CACHE=$WORK/kcache PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
# the imports, -P: not thunder/ from the current folder (the checkout, without the mapping); in a
# dry run also -S with this Python's site folders by path: no .pth file, so not an installed thunder
ISOLATE=(-P)
CHECK_PATH=$PYTHONPATH
if [[ $DRY == 1 ]]; then
  ISOLATE=(-S -P)
  CHECK_PATH=$PYTHONPATH:$("$PYTHON" -c "import sys; print(':'.join(p for p in sys.path if 'site-packages' in p))")
fi
PYTHONPATH=$CHECK_PATH "$PYTHON" "${ISOLATE[@]}" - "$WORK/shim" <<'PY' || exit 1
import sys, torch, torch_mlir, thunder, thunder.lowering.gpu, thunder.dialects.mlir, thunder.tools.opt  # noqa: E401
assert thunder.__file__.startswith(sys.argv[1]), f"thunder from {thunder.__file__}, not the checkout"
import llvmlite
print(f"torch {torch.__version__}, cuda {torch.cuda.is_available()}, torch_mlir {torch_mlir.__path__[0]}, "
      f"llvmlite {llvmlite.__version__}, thunder from the checkout")
PY
PYTHONPATH=$CHECK_PATH "$PYTHON" "${ISOLATE[@]}" -m thunder --check || true  # what thunder runs on
echo "== setup done in $((SECONDS - START)) s"

# ---- the parts: name, timeout (s), budget (s: the part stops starting items after it)
# GPU_RUN_PARTS: which parts (default all four); GPU_RUN_SCALE: percent of the default times
# (a second run of what the first one left out: GPU_RUN_PARTS=bench GPU_RUN_SCALE=250)
PARTS=(${GPU_RUN_PARTS:-ops models bench graphs hotspots})  # and cpu, only when named
SCALE=${GPU_RUN_SCALE:-100}
FLAG=()
[[ $DRY == 1 ]] && FLAG=(--dry-run)
part() {
  local name=$1 limit=$(( $2 * SCALE / 100 )) budget=()
  [[ " ${PARTS[*]} " == *" $name "* ]] || return 0
  [[ -n ${3:-} ]] && budget=(--budget $(( $3 * SCALE / 100 )))
  echo "== part $name (timeout ${limit} s) at $((SECONDS - START)) s"
  timeout -k 10 "$limit" "$PYTHON" "$ROOT/benchmarks/gpu/$name.py" --out "$OUT/$name.json" "${FLAG[@]}" "${budget[@]}"
  local rc=$?
  echo "== part $name: exit $rc$( ((rc == 124 || rc == 137)) && echo ' (timed out)') at $((SECONDS - START)) s"
  if [[ -f $OUT/$name.json ]]; then
    "$PYTHON" -c "import json,sys; p=sys.argv[1]; d=json.load(open(p)); d['status']='exit $rc'; json.dump(d, open(p,'w'), indent=1)" "$OUT/$name.json"
  fi
}
if [[ $DRY == 1 ]]; then
  part ops 110 80; part models 60; part bench 60 30; part graphs 45; part hotspots 45; part cpu 150
else
  # (the first device run, an H200: ops 107 s, models 29 s with every backward failing early,
  # bench 50 s, graphs 13 s, hotspots 16 s; the timeouts add up to 400 s, setup ~20 s)
  part ops 150 130; part models 80; part bench 90 75; part graphs 35; part hotspots 45
  part cpu 480 240  # only when named: GPU_RUN_PARTS=cpu (the machine's CPU, realistic.py)
fi

echo "== summary after $((SECONDS - START)) s"
"$PYTHON" "$ROOT/benchmarks/gpu/summary.py" "$OUT" "${PARTS[@]}" | tee "$OUT/summary.md"
rc=${PIPESTATUS[0]}
echo "== done in $((SECONDS - START)) s; figures and errors: $OUT/*.json, the whole log: $OUT/run.log"
exec >&- 2>&-
wait "$TEE"  # run.log complete before the tool collects $OUT
exit "$rc"
