#!/bin/sh
# Run a command (the compiler, during a wheel build) inside the build root $FUSE_WHEEL_ROOT, in the
# directory the caller is in: scripts/build_wheels.sh names this as meson's C and C++ compiler,
# so meson, Cython and ninja run on this machine while every compile and link sees only the
# root's glibc, libstdc++ and Gloo.  The caller's directories are bind-mounted at the same paths
# inside the root, so the paths on the command line mean the same files on both sides.
exec chroot "$FUSE_WHEEL_ROOT" /usr/bin/env -i PATH=/usr/lib/ccache:/usr/bin:/bin HOME=/root \
  LANG=C.UTF-8 CCACHE_DIR=/var/cache/ccache CCACHE_BASEDIR="$FUSE_WHEEL_BASEDIR" \
  CCACHE_NOHASHDIR=1 /bin/sh -c 'cd "$1" && shift && exec "$@"' sh "$PWD" "$@"
