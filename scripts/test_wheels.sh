#!/usr/bin/env bash
# The wheel tests (tests/wheels), as root: fuse's binary wheels installed offline into minimal
# Debian roots that have no compiler and no libgloo (bookworm with its Python 3.11, trixie with
# its 3.13), each training on 2 workers with NumPy and, where torch's CPU build exists for that
# Python, with fuse.torch.
#   1. the wheels: scripts/build_wheels.sh 3.11 3.13 (cached by the sources' hash; each
#      version's build folder redoes only what changed);
#   2. the roots: debootstrap --variant=minbase with python3 and python3-venv, and torch's CPU
#      build put in the system's site-packages (the test installs fuse-dl[torch] beside it);
#      made once per machine and cached in $FUSE_WHEEL_CACHE like the build root;
#   3. pytest tests/wheels, which runs each job in a network namespace of its own (no network)
#      chrooted into the root; and the extras test when asked (see below).
# Ends with pytest's summary line.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "test_wheels: needs root (debootstrap, chroot, namespaces)" >&2
  exit 1
fi
[ -x .venv/bin/python ] || bash scripts/setup.sh
CACHE=${FUSE_WHEEL_CACHE:-/var/cache/fuse-wheels}
MIRROR=${FUSE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
TORCH_VERSION=${FUSE_TORCH_VERSION:-2.13.0}
PACKAGES=python3,python3-venv
WHEELHOUSE=$CACHE/test-wheelhouse
FUSE_WHEELHOUSE=$WHEELHOUSE bash scripts/build_wheels.sh 3.11 3.13

roots=()
for target in bookworm:3.11 trixie:3.13; do
  suite=${target%%:*} version=${target#*:}
  key=$(printf '%s\n' "$suite" "$PACKAGES" v1 | sha256sum | cut -c1-12)
  root=$CACHE/test-root-$suite-$key
  if [ ! -f "$root/.debootstrapped" ]; then
    echo "test_wheels: making the $suite root $root (once per machine)"
    rm -rf "$root"
    debootstrap --variant=minbase --include="$PACKAGES" "$suite" "$root" "$MIRROR" >/dev/null
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    touch "$root/.debootstrapped"
  fi
  # torch's CPU build and its dependencies, for the root's own Python, downloaded here and
  # installed there offline into the system's site-packages: what a user's image would already
  # have.  Only the CPU build (+cpu): the CUDA one pulls several GB of nvidia-* packages.  Where
  # the index has no CPU build for that Python (here: only for 3.11), the root goes without
  # torch and its torch job reports itself skipped, saying so.
  deps=$CACHE/test-deps-cp${version/./}
  torch="torch==$TORCH_VERSION+cpu"
  if [ "$(cat "$root/.torch" 2>/dev/null)" != "$torch" ] &&
     .venv/bin/python -m pip download -q --only-binary=:all: --python-version "$version" \
       --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
       --platform manylinux_2_17_x86_64 -d "$deps" "$torch"; then
    mkdir -p "$root/deps"
    cat > "$root/tmp/install-torch.sh" <<'EOF'
set -eu
python3 -m venv /tmp/bootstrap
site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
/tmp/bootstrap/bin/python -m pip install -q --no-index --find-links /deps --target "$site" torch
rm -rf /tmp/bootstrap /tmp/install-torch.sh
EOF
    unshare --mount --propagation private /bin/sh -euc '
      mount --bind "$2" "$1/deps"; mount -t proc proc "$1/proc"; mount --rbind /dev "$1/dev"
      chroot "$1" /bin/sh /tmp/install-torch.sh' sh "$root" "$deps"
    rmdir "$root/deps"
    echo "$torch" > "$root/.torch"
  fi
  if [ "$(cat "$root/.torch" 2>/dev/null)" = "$torch" ]; then
    roots+=("$suite:$version:$root:torch")
  else
    echo "test_wheels: no CPU build of $torch for Python $version on this index:" \
         "the $suite root trains with NumPy only"
    roots+=("$suite:$version:$root:numpy")
  fi
done
# what fuse-dl needs besides torch (numpy, stevedore, cloudpickle), for the offline installs,
# and pip's own wheel, which the test runs pip from
for version in 3.11 3.13; do
  .venv/bin/python -m pip download -q --only-binary=:all: --python-version "$version" \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_17_x86_64 -d "$CACHE/test-deps-cp${version/./}" \
    "numpy>=1.23" "stevedore>=5" "cloudpickle>=2" pip
done
# The extras test (tests/wheels/test_extras.py) installs every extra into a clean venv, a few GB
# and half an hour here: it runs only when asked, FUSE_WHEEL_TEST_EXTRAS=1 (else it says skipped).
FUSE_WHEEL_TEST_ROOTS="${roots[*]}" FUSE_WHEEL_TEST_WHEELHOUSE=$WHEELHOUSE \
FUSE_WHEEL_TEST_DEPS=$CACHE/test-deps PATH="$(pwd)/.venv/bin:$PATH" \
  python -m pytest tests/wheels "$@"
