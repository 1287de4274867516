#!/usr/bin/env bash
# The Kubernetes tests (tests/kubernetes), as root on a fresh machine with no cluster and no
# registry: install podman, runc and debootstrap from Debian, make podman work here
# (containers.conf), lint/render/validate the chart (helm-python-sdk, kubernetes-validate),
# build fuse's image offline (scripts/build_image.sh; its base and fuse's wheel cached in
# /var/cache/fuse-k8s) and run the chart's rendered pods as podman containers.  Ends with
# pytest's summary line.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "test_kubernetes: needs root (podman's networks, debootstrap)" >&2
  exit 1
fi
[ -x .venv/bin/python ] || bash scripts/setup.sh
missing=""
for tool in podman runc debootstrap; do command -v "$tool" >/dev/null || missing="$missing $tool"; done
if [ -n "$missing" ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc debootstrap >/dev/null
fi
# What podman needs on these machines: crun refuses the hybrid cgroup layout (we pass --runtime
# runc), the cgroup manager must be cgroupfs, and podman's default ulimits exceed the hard limit.
.venv/bin/python - <<'PY'
import os
path = "/etc/containers/containers.conf"
lines = open(path).read().splitlines() if os.path.exists(path) else []
def put(table, key, value):
    """Set key = value in [table]: replace it there, else add it under the header, else add
    the table."""
    current = None
    for i, line in enumerate(lines):
        text = line.strip()
        if text.startswith("[") and not text.startswith("[["):
            current = text.strip("[]").strip()
        elif current == table and text.split("=")[0].strip() == key:
            lines[i] = f"{key} = {value}"
            return
    for i, line in enumerate(lines):
        if line.strip() == f"[{table}]":
            lines.insert(i + 1, f"{key} = {value}")
            return
    lines.extend(["", f"[{table}]", f"{key} = {value}"])
put("containers", "default_ulimits", "[]")
put("engine", "cgroup_manager", '"cgroupfs"')
os.makedirs(os.path.dirname(path), exist_ok=True)
open(path, "w").write("\n".join(lines).lstrip("\n") + "\n")
PY
.venv/bin/python -m pip install -q helm-python-sdk kubernetes-validate
image=${FUSE_K8S_IMAGE:-localhost/fuse:test}
bash scripts/build_image.sh "$image"
FUSE_K8S_IMAGE=$image PATH="$(pwd)/.venv/bin:$PATH" python -m pytest tests/kubernetes "$@"
