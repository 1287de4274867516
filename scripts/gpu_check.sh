#!/usr/bin/env bash
# fuse on a GPU machine in one command: install the carried wheel offline, run tests/gpu and the
# GPU benchmark (bench/studies/gpu.py), and write a JSON summary and a log to $OUT.
#
#   scripts/gpu_check.sh --prepare   here, with a registry: wheelhouse/ gets fuse's CPython 3.12
#                                    wheel (scripts/build_wheels.sh) and the pure-Python wheels
#                                    fuse needs that the GPU machine lacks (stevedore and its own)
#   scripts/gpu_check.sh             there: uses wheelhouse/ only (no registry, no compiler);
#                                    wheelhouse/ is git-ignored, so carry it there
#   scripts/gpu_check.sh --dry-run   anywhere: the same steps with the GPU parts skipped, to
#                                    check the plumbing on a machine without a GPU
#
# The GPU machine's Python already has torch, CuPy and NCCL: fuse goes into a venv made with
# --system-site-packages over that Python, so those are the ones used (when that Python is
# itself a venv, a .pth file adds its site-packages, which --system-site-packages would miss).
# The tests run from a copy of tests/ outside the checkout, so the checkout's uncompiled fuse/
# cannot shadow the installed one.  A GPU that is present makes FUSE_TEST_REQUIRE=gpu fail any
# GPU test that would skip.  Time limits: tests 210 s, benchmark 180 s (the whole under 8 min).
# Environment: OUT (default /tmp/gpu_check), FUSE_WHEELHOUSE (default wheelhouse), PYTHON (the
# Python with torch; default python3).  Exits non-zero when the install, a test or the
# benchmark failed.
set -uo pipefail
cd "$(dirname "$0")/.."
SRC=$(pwd)
MODE=run
case "${1:-}" in
  --prepare) MODE=prepare ;;
  --dry-run) MODE=dry-run ;;
  "") ;;
  *) echo "usage: $0 [--prepare | --dry-run]" >&2; exit 2 ;;
esac
WHEELHOUSE=$(realpath -m "${FUSE_WHEELHOUSE:-wheelhouse}")
PYTHON=${PYTHON:-python3}
# What fuse needs beyond numpy and cloudpickle, which the GPU machine's image has.
EXTRA_WHEELS=(stevedore)

if [ "$MODE" = prepare ]; then
  set -e
  pyver=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  if [ -x scripts/build_wheels.sh ] || [ -f scripts/build_wheels.sh ]; then
    FUSE_WHEELHOUSE=$WHEELHOUSE bash scripts/build_wheels.sh 3.12
  else
    echo "gpu_check --prepare: scripts/build_wheels.sh is missing (the binary-wheel build);" \
         "put a fuse_dl-*-cp312-*manylinux*.whl in $WHEELHOUSE by other means" >&2
    exit 1
  fi
  # pure-Python wheels: any platform; --no-deps per name, then their own needs the same way
  "$PYTHON" -m pip download -q --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_17_x86_64 --platform any \
    -d "$WHEELHOUSE" "${EXTRA_WHEELS[@]}"
  ls -l "$WHEELHOUSE"
  echo "gpu_check --prepare: carry wheelhouse/ to the GPU machine (pyver here: $pyver)"
  exit 0
fi

OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
LOG=$OUT/gpu_check.log
WORK=$(mktemp -d /tmp/gpu_check.XXXXXX)
exec > >(tee "$LOG") 2>&1
START=$SECONDS
say() { echo "gpu_check [$((SECONDS - START))s]: $*"; }
STEPS=()        # "name=rc" for the summary
step() { STEPS+=("$1=$2"); say "$1: $( [ "$2" = 0 ] && echo ok || echo "FAILED (exit $2)")"; }

# -- 1. install fuse from the wheelhouse, offline, into a venv over the machine's Python --------
VENV=$WORK/venv
PY=$VENV/bin/python
if "$PYTHON" -m venv --system-site-packages "$VENV"; then
  PIP=("$PY" -m pip)
else    # a Python without ensurepip (Debian's without python3-venv): its own pip installs
  say "venv without pip; $PYTHON's pip installs into it"
  rm -rf "$VENV"
  "$PYTHON" -m venv --system-site-packages --without-pip "$VENV"
  PIP=("$PYTHON" -m pip --python "$PY")
fi
# when $PYTHON is itself a venv, --system-site-packages shows its base's packages, not its own
"$PYTHON" - "$VENV" <<'PY'
import os, site, sys, sysconfig
venv = sys.argv[1]
if sys.prefix != sys.base_prefix:
    target = os.path.join(venv, "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}",
                          "site-packages", "_parent_venv.pth")
    dirs = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    with open(target, "w") as f:
        f.write("\n".join(dirs) + "\n")
    print("parent venv's site-packages added:", ", ".join(dirs))
PY
tag=$("$PY" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
wheel=$(ls "$WHEELHOUSE"/fuse_dl-*-"$tag"-"$tag"-*.whl 2>/dev/null | head -1)
if [ -z "$wheel" ]; then
  say "no fuse wheel for $tag in $WHEELHOUSE (scripts/gpu_check.sh --prepare makes it)"
  install_rc=1
else
  say "installing $(basename "$wheel") offline"
  "${PIP[@]}" install -q --no-index --find-links "$WHEELHOUSE" "$wheel"
  install_rc=$?
fi
step install "$install_rc"

# -- 2. what is here ------------------------------------------------------------------------------
cd "$WORK"      # nothing of the checkout on sys.path from here on
"$PY" - <<'PY' > "$WORK/versions.json"
import importlib.metadata as md, json, shutil, subprocess
def version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None
v = {name: version(name) for name in
     ("fuse-dl", "torch", "cupy-cuda13x", "cupy-cuda12x", "nvidia-nccl-cu13",
      "nvidia-nccl-cu12", "numpy", "stevedore", "mpi4py", "torchvision")}
try:
    import torch
    v["torch_cuda"] = torch.version.cuda
    v["cuda_available"] = torch.cuda.is_available()
    if v["cuda_available"]:
        v["gpu"] = torch.cuda.get_device_name(0)
        v["gpus"] = torch.cuda.device_count()
        n = torch.cuda.nccl.version()
        v["nccl_torch"] = ".".join(map(str, n)) if isinstance(n, tuple) else str(n)
except Exception as err:
    v["torch_error"] = repr(err)
try:
    from cupy.cuda import nccl
    v["nccl_cupy"] = nccl.get_version()
except Exception as err:
    v["nccl_cupy_error"] = repr(err)
if shutil.which("nvidia-smi"):
    q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                        "--format=csv,noheader"], capture_output=True, text=True)
    v["nvidia_smi"] = q.stdout.strip() or q.stderr.strip()
print(json.dumps(v))
PY
cat "$WORK/versions.json"; echo
"$PY" -m fuse.info 2>&1 | sed -n '1,40p'
HAS_GPU=$("$PY" -c 'import json, sys
print(int(bool(json.load(open(sys.argv[1])).get("cuda_available"))))' "$WORK/versions.json" \
  2>/dev/null || echo 0)
if [ "$MODE" = dry-run ]; then
  say "dry run: GPU parts skipped (any GPU hidden from the tests)"
  HAS_GPU=0
  export CUDA_VISIBLE_DEVICES=""
elif [ "$HAS_GPU" != 1 ]; then
  say "no GPU visible: the GPU tests and the benchmark are skipped (this is not a GPU check)"
fi

# -- 3. the tests, from a copy of tests/ ----------------------------------------------------------
cp -r "$SRC/tests" "$SRC/pyproject.toml" "$SRC/bench" "$WORK/"
cd "$WORK"
if [ "$install_rc" = 0 ]; then
  require=()
  [ "$HAS_GPU" = 1 ] && require=(FUSE_TEST_REQUIRE=gpu)
  # the stand-in runs of the same workers first (no GPU needed: the installed wheel's wiring),
  # then tests/gpu (skipped with the reason without a GPU)
  standin=tests/frameworks/torch/test_gpu_standin.py
  env "${require[@]}" timeout 210 "$PY" -m pytest -p no:cacheprovider -q -ra \
      --junitxml="$OUT/tests.xml" tests/gpu \
      "$standin::test_standin_wiring_collectives_match_the_cpu_call" \
      "$standin::test_cpu_run_of_the_shared_gpu_training_check"
  step tests $?
else
  step tests skipped
fi

# -- 4. the benchmark -----------------------------------------------------------------------------
if [ "$HAS_GPU" = 1 ] && [ "$install_rc" = 0 ]; then
  PYTHONUNBUFFERED=1 timeout 180 "$PY" bench/studies/gpu.py --json "$OUT/bench_gpu.json"
  step bench $?
else
  "$PY" bench/studies/gpu.py --help > /dev/null
  step bench_help $?
fi

# -- 5. the summary -------------------------------------------------------------------------------
"$PY" - "$OUT" "$WORK/versions.json" "$MODE" "$HAS_GPU" "$((SECONDS - START))" "${STEPS[@]}" <<'PY'
import json, os, sys
import xml.etree.ElementTree as ET
out, versions, mode, has_gpu, seconds, *steps = sys.argv[1:]
summary = {"mode": mode, "gpu": has_gpu == "1", "seconds": int(seconds),
           "versions": json.load(open(versions)), "steps": dict(s.split("=", 1) for s in steps)}
junit = os.path.join(out, "tests.xml")
if os.path.exists(junit):
    cases = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = child.tag
                summary.setdefault("why", {})[case.get("name")] = (child.get("message") or "")[:500]
        cases.append({"test": f"{case.get('classname')}::{case.get('name')}", "outcome": outcome,
                      "seconds": float(case.get("time") or 0)})
    summary["tests"] = cases
    summary["counts"] = {k: sum(c["outcome"] == k for c in cases)
                         for k in ("passed", "failure", "error", "skipped")}
bench = os.path.join(out, "bench_gpu.json")
if os.path.exists(bench):
    rows = json.load(open(bench))["rows"]
    summary["bench"] = [{k: r.get(k) for k in ("case", "median", "ratio", "ratio_torch",
                                                 "engine_cost_s", "fraction_of_copy", "overhead")}
                        for r in rows]
summary["ok"] = all(v in ("0", "skipped") for v in summary["steps"].values())
json.dump(summary, open(os.path.join(out, "gpu_check.json"), "w"), indent=1)
print(json.dumps({k: summary[k] for k in ("mode", "gpu", "seconds", "steps", "ok")}))
if "counts" in summary:
    print("tests:", summary["counts"])
PY
rc=0
for s in "${STEPS[@]}"; do
  case "${s#*=}" in 0|skipped) ;; *) rc=1 ;; esac
done
rm -rf "$WORK"
say "done, exit $rc; log and summary in $OUT"
exit $rc
