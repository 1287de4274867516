#!/usr/bin/env bash
# Run tests/gpu (real CuPy, real NCCL, 1 and 2 GPUs) on a machine with NVIDIA GPUs.
#
# Uses .venv (scripts/setup.sh makes it; PyPI's torch wheel is the CUDA build) and installs the
# nccl extra into it (cupy-cuda12x, nvidia-nccl-cu12).  FUSE_TEST_REQUIRE=gpu makes a missing
# GPU, CuPy or NCCL fail the run instead of skipping it.  Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  bash scripts/setup.sh
fi
.venv/bin/python -m pip install -q -e '.[nccl]'
.venv/bin/python -m fuse.info | sed -n '/^backends/,/^$/p'
FUSE_TEST_REQUIRE=gpu PATH="$(pwd)/.venv/bin:$PATH" python -m pytest tests/gpu -ra "$@"
