#!/usr/bin/env bash
# The GPU gate in one call on a GPU machine with no network (the device machine: x86_64, CPython 3.12
# with torch 2.11.0+cu130 as `python3`, nvcc 13.0):
#   1. decompresses the canary (tests/gpu/canary/, the flash_attn build under test, committed) after checking
#      its sha256 against manifest.json, and installs it with the wheels carried in .gpu-wheels/ (PyPI's small
#      wheels and faforge, see tests/gpu/stage_gpu_wheels.sh) with pip --no-index into a private folder;
#      FlashAttention-3's canary (tests/gpu/canary/flash-attn-3/) is checked and installed the same way, then
#      passes `faforge check-abi --stable-abi` against this machine's torch;
#   2. runs `faforge test-gpu` with the archs and head dims the canary's manifest declares (the suite: compat
#      check first, then numerics; capped, after which the reports are still written);
#      then `faforge test-gpu --family flash-attn-3` (what its flash_attn_config.py declares);
#   3. FlashAttention-4: puts its payload back together from build/gpu-payload/part*/ (carried one part per call,
#      faforge.families.flash_attn_4.gpu_payload; every part's and wheel's sha256 checked), installs it and copies
#      it over the private folder as pip would into one site-packages (FA4's flash_attn/cute/ over flash-attn 2's
#      copy), then runs `faforge test-gpu --family flash-attn-4` (bf16; first calls, the DSL's compiles, in
#      REPORT_DIR/fa4/first_calls.json) with the DSL's kernel cache on, so that the benchmark reuses them;
#   4. runs `faforge bench-gpu` (TFLOP/s of FA2, FA3 and FA4 beside PyTorch SDPA; FA4's first calls in fa4_gate);
#   5. leaves run.log, summary.json, junit.xml, pytest.log, bench.json and bench.txt in REPORT_DIR (FA3's suite:
#      REPORT_DIR/fa3/, FA4's: REPORT_DIR/fa4/).
# The whole run stays under 5 minutes (the caps add up to 290 s; the installs take about 20 s).
#
# usage: bash tests/gpu/run_on_gpu_machine.sh REPORT_DIR
#   environment: PYTHON (default python3), FAFORGE_GPU_WHEELS (default <repo>/.gpu-wheels),
#                FAFORGE_GPU_CANARY (default <repo>/tests/gpu/canary; the offline rehearsal points it at a stand-in),
#                FAFORGE_GPU_CANARY_FA3 (default $FAFORGE_GPU_CANARY/flash-attn-3: FlashAttention-3's canary),
#                FAFORGE_GPU_FA4_PAYLOAD (default <repo>/build/gpu-payload: FlashAttention-4's parts)
# exit: 0 suites passed and benchmark ran; 1 a failure (install, a test, the benchmark, a time cap);
#       3 nothing verified (no usable GPU, no CUDA torch, no flash_attn, or a binary without code for this GPU).
# Device tool (docs/maintaining/gpu-gate.md): payload calls carry build/gpu-payload/part1, part2; then
#   command="bash tests/gpu/run_on_gpu_machine.sh $OUT", carry=[".gpu-wheels", "build/gpu-payload/part3"], timeout_s=330.
set -uo pipefail

REPORT=${1:?usage: run_on_gpu_machine.sh REPORT_DIR}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
WHEELS=${FAFORGE_GPU_WHEELS:-$REPO/.gpu-wheels}
CANARY=${FAFORGE_GPU_CANARY:-$REPO/tests/gpu/canary}
CANARY_FA3=${FAFORGE_GPU_CANARY_FA3:-$CANARY/flash-attn-3}
FA4_PAYLOAD=${FAFORGE_GPU_FA4_PAYLOAD:-$REPO/build/gpu-payload}
PY=${PYTHON:-python3}
TEST_CAP_S=120
FA3_CAP_S=45
FA4_CAP_S=75
BENCH_CAP_S=50
# The benchmark's shapes here: two seqlens of the default six, so that three families fit the cap.
BENCH_SEQLENS=2048,8192

unpack_canary() {
  # $1: a canary folder (an xz'd wheel + manifest.json), $2: where the checked, decompressed wheel goes
  "$PY" - "$1" "$2" <<'PY'
import hashlib, json, lzma, pathlib, shutil, sys
folder, out = map(pathlib.Path, sys.argv[1:])
manifest = json.loads((folder / "manifest.json").read_text())
source = folder / manifest["file"]
digest = hashlib.sha256(source.read_bytes()).hexdigest()
print(f"canary: {source.name} sha256 {digest} {'equal to' if digest == manifest['sha256'] else 'DIFFERS FROM'} the manifest's")
if digest != manifest["sha256"]:
    sys.exit(1)
target = out / source.name.removesuffix(".xz")
with lzma.open(source) as packed, open(target, "wb") as unpacked:
    shutil.copyfileobj(packed, unpacked)
print(f"canary: decompressed {target.name} ({target.stat().st_size} bytes)")
declares = manifest["declares"]
if "head_dims" in declares:  # flash-attn 2's: what test-gpu is told the build contains
    (out / "declared.txt").write_text(f"{declares['archs']}\n{','.join(map(str, declares['head_dims']))}\n")
PY
}

main() {
  local site unpacked
  site=$(mktemp -d /tmp/faforge-gpu-site.XXXXXX)
  unpacked=$(mktemp -d /tmp/faforge-gpu-wheels.XXXXXX)
  echo "== machine"
  echo "$(uname -m), $("$PY" --version 2>&1) at $(command -v "$PY")"
  nvidia-smi -L 2>&1 || echo "(no nvidia-smi)"

  echo "== install from $WHEELS (pip --no-index)"
  if ! compgen -G "$WHEELS/faforge-*.whl" >/dev/null; then
    echo "no faforge wheel in $WHEELS: run tests/gpu/stage_gpu_wheels.sh where there is network, then carry .gpu-wheels"
    return 1
  fi
  local xz
  for xz in "$WHEELS"/*.whl.xz; do
    [ -e "$xz" ] || continue
    echo "+ unxz $(basename "$xz")"
    "$PY" -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
      "$xz" "$unpacked/$(basename "${xz%.xz}")" || return 1
  done
  local declared=()
  if [ -f "$CANARY/manifest.json" ]; then
    unpack_canary "$CANARY" "$unpacked" || return 1
    declared=(--declared-archs "$(sed -n 1p "$unpacked/declared.txt")" --declared-head-dims "$(sed -n 2p "$unpacked/declared.txt")")
  fi
  # FlashAttention-3's canary (tests/gpu/canary/flash-attn-3/): its own wheel, installed beside flash_attn
  if [ -f "$CANARY_FA3/manifest.json" ]; then
    unpack_canary "$CANARY_FA3" "$unpacked" || return 1
  fi
  compgen -G "$unpacked/flash_attn-*.whl" >/dev/null || echo "note: no canary and no flash_attn wheel carried; the suite will skip"
  local wheels=("$WHEELS"/*.whl)
  compgen -G "$unpacked/*.whl" >/dev/null && wheels+=("$unpacked"/*.whl)
  echo "+ $PY -m pip install --no-index --no-deps --target $site ${wheels[*]##*/}"
  "$PY" -m pip install --quiet --no-index --no-deps --no-compile --disable-pip-version-check --target "$site" "${wheels[@]}" \
    || return 1
  echo "installed: $(cd "$site" && ls -d *.dist-info | tr '\n' ' ')"
  export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}

  echo "== faforge check-abi (the installed extension against this machine's torch libraries)"
  local ext torch_dir
  ext=$(compgen -G "$site/flash_attn_2_cuda*.so" | head -1)
  torch_dir=$("$PY" -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null) || torch_dir=
  if [ -n "$ext" ] && [ -n "$torch_dir" ]; then
    "$PY" -m faforge check-abi "$ext" --against "$torch_dir/lib" || return 1
  else
    echo "note: check-abi skipped (extension: ${ext:-none}; torch: ${torch_dir:-not importable})"
  fi

  echo "== faforge check-abi --stable-abi (flash-attn-3: only torch's stable C functions, and it loads on this torch)"
  local fa3
  fa3=$(compgen -G "$site/flash_attn_3/_C*.so" | head -1)
  if [ -n "$fa3" ] && [ -n "$torch_dir" ]; then
    "$PY" -m faforge check-abi "$fa3" --stable-abi --against "$torch_dir/lib" || return 1
  else
    echo "note: the stable-ABI check skipped (flash_attn_3 extension: ${fa3:-none}; torch: ${torch_dir:-not importable})"
  fi

  echo "== faforge test-gpu"
  timeout $((TEST_CAP_S + 45)) "$PY" -m faforge test-gpu --report-dir "$REPORT" --time-cap-s "$TEST_CAP_S" "${declared[@]}"
  local test_rc=$?
  [ "$test_rc" -eq 124 ] && echo "faforge test-gpu: killed $((TEST_CAP_S + 45))s in (its own cap did not stop it)"

  local fa3_rc=0
  if [ -n "$fa3" ]; then
    echo "== faforge test-gpu --family flash-attn-3"
    timeout $((FA3_CAP_S + 30)) "$PY" -m faforge test-gpu --family flash-attn-3 --report-dir "$REPORT/fa3" --time-cap-s "$FA3_CAP_S"
    fa3_rc=$?
  fi

  local fa4_rc=3
  if compgen -G "$FA4_PAYLOAD/part*/manifest.json" >/dev/null; then
    echo "== flash-attn-4 payload from $FA4_PAYLOAD (parts and wheels checked, pip --no-index --no-deps)"
    local fa4site
    fa4site=$(mktemp -d /tmp/faforge-gpu-fa4.XXXXXX)
    "$PY" -m faforge.families.flash_attn_4.gpu_payload install --from "$FA4_PAYLOAD" --target "$fa4site" >/dev/null \
      || return 1
    # one site-packages, as pip makes it: FA4's flash_attn/cute/ files replace flash-attn 2's copy of them
    cp -a "$fa4site"/. "$site"/ && rm -rf "$fa4site"
    PYTHONPATH=$("$PY" -m faforge.families.flash_attn_4.gpu_payload pythonpath "$site")${PYTHONPATH#"$site"} || return 1
    echo "installed: flash-attn-4 $(cd "$site" && ls -d flash_attn_4-*.dist-info nvidia_cutlass_dsl-*.dist-info | tr '\n' ' ')"
    export FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1
    FLASH_ATTENTION_CUTE_DSL_CACHE_DIR=$(mktemp -d /tmp/faforge-gpu-fa4-kernels.XXXXXX)
    export FLASH_ATTENTION_CUTE_DSL_CACHE_DIR
    echo "== faforge test-gpu --family flash-attn-4 (bf16)"
    timeout $((FA4_CAP_S + 30)) "$PY" -m faforge test-gpu --family flash-attn-4 --report-dir "$REPORT/fa4" \
      --time-cap-s "$FA4_CAP_S" -- -k "bf16 or metadata"
    fa4_rc=$?
    [ -f "$REPORT/fa4/first_calls.json" ] && cat "$REPORT/fa4/first_calls.json"
  else
    echo "note: no flash-attn-4 payload in $FA4_PAYLOAD (build it and carry its parts: docs/maintaining/gpu-gate.md)"
  fi

  echo "== faforge bench-gpu"
  timeout "$BENCH_CAP_S" "$PY" -m faforge bench-gpu --seqlens "$BENCH_SEQLENS" --report-dir "$REPORT" | tee "$REPORT/bench.txt"
  local bench_rc=${PIPESTATUS[0]}
  [ "$bench_rc" -eq 124 ] && echo "faforge bench-gpu: stopped after ${BENCH_CAP_S}s"

  echo "== exit codes: test-gpu $test_rc, test-gpu flash-attn-3 $fa3_rc, test-gpu flash-attn-4 $fa4_rc, bench-gpu $bench_rc"
  rm -rf "$site" "$unpacked" "${FLASH_ATTENTION_CUTE_DSL_CACHE_DIR:-}"
  case "$test_rc/$fa3_rc/$fa4_rc/$bench_rc" in
    0/0/0/0) return 0 ;;
    [03]/[03]/[03]/[03]) return 3 ;;
    *) return 1 ;;
  esac
}

mkdir -p "$REPORT" || exit 1
main 2>&1 | tee "$REPORT/run.log"
rc=${PIPESTATUS[0]}
echo "run_on_gpu_machine.sh: exit $rc (0 passed, 1 failed, 3 not verified)" | tee -a "$REPORT/run.log"
exit "$rc"
