#!/usr/bin/env bash
# Fill a folder (default: .gpu-wheels/ at the repo root, git-ignored) with every wheel that
# tests/gpu/run_on_gpu_machine.sh installs on the GPU machine, which has no network:
#   * faforge itself, built from this checkout (installed there with --no-deps: the machine's image has
#     pyyaml, and test-gpu/bench-gpu need nothing else of faforge's dependencies but pyelftools);
#   * pytest, its dependencies, einops and pyelftools, pinned in tests/gpu/gpu-wheels.txt, for CPython 3.12 x86_64;
#   * only with --flash-attn-wheel: another flash_attn wheel to test, recompressed with xz as NAME.whl.xz.
# The flash_attn build under test is normally the canary committed in tests/gpu/canary/ (xz'd wheel +
# manifest.json): run_on_gpu_machine.sh installs it from there, so it is not carried twice. The last line
# here says whether the canary's kernel inputs changed since it was built (a report, not a failure).
#
# usage: tests/gpu/stage_gpu_wheels.sh [--flash-attn-wheel PATH] [--dest DIR]
# then:  device run  command="bash tests/gpu/run_on_gpu_machine.sh $OUT"  carry=[".gpu-wheels"]  timeout_s=330
#        (FlashAttention-4's payload parts first: docs/maintaining/gpu-gate.md)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DEST=$REPO/.gpu-wheels
FA_WHEEL=
# What one device call may carry in all (working tree included); keep a margin for the tracked files.
BUDGET_MIB=${FAFORGE_GPU_WHEELS_BUDGET_MIB:-60}
PYTHON=${PYTHON:-python3}

usage() { sed -n '2,16p' "$0" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --flash-attn-wheel) FA_WHEEL=${2:?--flash-attn-wheel needs a path}; shift 2 ;;
    --no-flash-attn) shift ;;  # the old spelling of the default
    --dest) DEST=${2:?--dest needs a folder}; shift 2 ;;
    -h|--help) usage ;;
    *) echo "stage_gpu_wheels.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
if [ -n "$FA_WHEEL" ] && [ ! -f "$FA_WHEEL" ]; then
  echo "stage_gpu_wheels.sh: --flash-attn-wheel $FA_WHEEL: no such file" >&2
  exit 2
fi

rm -rf "$DEST"
mkdir -p "$DEST"
run() { echo "+ $*"; "$@"; }

run "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$DEST" -r "$REPO/tests/gpu/gpu-wheels.txt"
run "$PYTHON" -m pip wheel --quiet --no-deps -w "$DEST" "$REPO"

if [ -n "$FA_WHEEL" ]; then
  case $(basename "$FA_WHEEL") in
    flash_attn-*-cp312-cp312-linux_x86_64.whl|flash_attn-*-cp312-cp312-manylinux*_x86_64.whl|flash_attn-*-py3-none-any.whl) ;;
    *) echo "stage_gpu_wheels.sh: $FA_WHEEL is not a flash_attn wheel for cp312 x86_64 (the GPU machine's Python)" >&2; exit 2 ;;
  esac
  echo "+ recompress $(basename "$FA_WHEEL") with xz"
  "$PYTHON" - "$FA_WHEEL" "$DEST/$(basename "$FA_WHEEL").xz" <<'PY'
import lzma, shutil, sys, tempfile, zipfile
source, target = sys.argv[1:]
# Store the members uncompressed, then xz the whole zip: pip installs the decompressed file as is
# (RECORD hashes are of the members' contents, which do not change).
with tempfile.TemporaryFile() as stored:
    with zipfile.ZipFile(source) as zin, zipfile.ZipFile(stored, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            zout.writestr(info, zin.read(info), compress_type=zipfile.ZIP_STORED)
    stored.seek(0)
    with lzma.open(target, "wb", preset=9) as out:
        shutil.copyfileobj(stored, out)
PY
fi

ls -l "$DEST"
total_kib=$(du -sk "$DEST" | cut -f1)
echo "staged $((total_kib / 1024)) MiB in $DEST (budget $BUDGET_MIB MiB)"
if [ "$total_kib" -gt $((BUDGET_MIB * 1024)) ]; then
  echo "stage_gpu_wheels.sh: $DEST holds $((total_kib / 1024)) MiB, over the $BUDGET_MIB MiB a device call can carry" \
       "with the working tree; build the wheel for fewer archs (e.g. --archs 90) or fewer head dims" >&2
  exit 1
fi
PYTHONPATH=$REPO/scripts "$PYTHON" -m faforge test-gpu --canary-status || echo "stage_gpu_wheels.sh: canary status not available"
