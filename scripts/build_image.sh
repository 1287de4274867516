#!/usr/bin/env bash
# Build fuse's image (docker/Dockerfile) with podman, with no registry and no network inside the
# build:
#   1. the base image: Debian bookworm made by debootstrap (with python3, openssh and tini),
#      imported into podman; cached in $FUSE_K8S_CACHE by its inputs (the suite and the package
#      list), so it is made once per machine (about 1.5 min);
#   2. the wheels, in the build context: fuse's binary wheel (scripts/build_wheels.sh, cached by
#      the hash of its sources; it carries Gloo) and its dependencies downloaded by pip (torch's
#      CPU build);
#   3. podman build --build-arg BASE=<the base>, timed; prints the image's size and layers.
# Usage: scripts/build_image.sh [IMAGE]   (default localhost/fuse:test).  Needs podman, runc,
# debootstrap and the containers.conf of scripts/test_kubernetes.sh; root.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
IMAGE=${1:-localhost/fuse:test}
CACHE=${FUSE_K8S_CACHE:-/var/cache/fuse-k8s}
PY=${PYTHON:-$ROOT/.venv/bin/python}
SUITE=bookworm
MIRROR=${FUSE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
PACKAGES=python3,python3-venv,openssh-client,openssh-server,tini,ca-certificates,procps
mkdir -p "$CACHE"

# -- 1. the base image --------------------------------------------------------------------------
base_key=$(printf '%s\n' "$SUITE" "$PACKAGES" minbase v1 | sha256sum | cut -c1-16)
BASE=${FUSE_K8S_BASE_NAME:-localhost/fuse-base}:$base_key
if ! podman image exists "$BASE"; then
  tarball=$CACHE/base-$base_key.tar
  if [ ! -s "$tarball" ]; then
    rootfs=$CACHE/rootfs-$base_key
    rm -rf "$rootfs"
    echo "build_image: debootstrap $SUITE into $rootfs (once per machine)"
    debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$rootfs" "$MIRROR" >/dev/null
    # no host key may ship in a layer: each container makes its own (ssh mode)
    rm -f "$rootfs"/etc/ssh/ssh_host_*
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
    rm -rf "$rootfs"
  fi
  podman import -q "$tarball" "$BASE" >/dev/null
fi

# -- 2. the build context: Dockerfile, examples, wheels -----------------------------------------
ctx=$CACHE/context
rm -rf "$ctx"
mkdir -p "$ctx/wheels"
cp docker/Dockerfile "$ctx/"
cp -r docker/examples "$ctx/examples"
# fuse's binary wheel for the base's Python (bookworm: 3.11), which carries Gloo: built by
# scripts/build_wheels.sh and cached there by the hash of its sources
FUSE_WHEELHOUSE=$CACHE/wheelhouse bash scripts/build_wheels.sh 3.11
cp "$CACHE"/wheelhouse/fuse_dl-*-cp311-*.whl "$ctx/wheels/"
torch_version=$("$PY" -c "import torch; print(torch.__version__)")
"$PY" -m pip download -q --only-binary=:all: -d "$CACHE/deps" \
  "torch==$torch_version" "numpy>=1.23" "stevedore>=5" "cloudpickle>=2"
cp "$CACHE"/deps/*.whl "$ctx/wheels/"

# -- 3. the image -------------------------------------------------------------------------------
# The image this tag named before: a rebuild moves the tag and would leave it behind, untagged,
# 1 GB a build (16 GB of them filled this machine's disk until CI's pip ran out of space).
previous=$(podman image inspect "$IMAGE" --format '{{.Id}}' 2>/dev/null || true)
start=$(date +%s.%N)
wheels_key=$(cd "$ctx/wheels" && sha256sum -- *.whl | sha256sum | cut -c1-16)
podman build -q --layers=false --runtime runc --build-arg BASE="$BASE" \
  --build-arg WHEELS="$wheels_key" -t "$IMAGE" -f "$ctx/Dockerfile" "$ctx" >/dev/null
end=$(date +%s.%N)
current=$(podman image inspect "$IMAGE" --format '{{.Id}}')
if [ -n "$previous" ] && [ "$previous" != "$current" ]; then
  # only if nothing else names or uses it (another tag, a container): then rmi refuses; keep it
  podman rmi "$previous" >/dev/null 2>&1 || true
fi
size=$(podman image inspect "$IMAGE" --format '{{.Size}}')
layers=$(podman image inspect "$IMAGE" --format '{{len .RootFS.Layers}}')
printf 'build_image: %s built in %s s (base %s): %d MB, %d layers\n' "$IMAGE" \
  "$(awk "BEGIN { printf \"%.0f\", $end - $start }")" "$BASE" $((size / 1000000)) "$layers"
