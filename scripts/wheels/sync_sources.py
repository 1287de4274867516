"""Mirror a checkout's files (tracked, and new ones git does not ignore) into a folder, writing
only the files whose content differs and deleting those that are gone.

scripts/build_wheels.sh builds from such a mirror at a fixed path in its cache: unchanged files
keep their old timestamps there, so ninja rebuilds (and Cython regenerates) only what changed,
even from a fresh clone whose every file is new.

Usage: python sync_sources.py CHECKOUT MIRROR
"""

import os
import shutil
import subprocess
import sys


def main(checkout: str, mirror: str) -> None:
    listed = subprocess.run(["git", "-C", checkout, "ls-files", "-co", "--exclude-standard", "-z"],
                            check=True, capture_output=True).stdout.decode().split("\0")
    wanted = {path for path in listed if path and os.path.isfile(os.path.join(checkout, path))}
    for path in sorted(wanted):
        source, target = os.path.join(checkout, path), os.path.join(mirror, path)
        with open(source, "rb") as f:
            data = f.read()
        try:
            with open(target, "rb") as f:
                if f.read() == data and os.stat(source).st_mode == os.stat(target).st_mode:
                    continue
        except FileNotFoundError:
            pass
        os.makedirs(os.path.dirname(target), exist_ok=True)
        tmp = target + ".sync-tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        shutil.copymode(source, tmp)
        os.replace(tmp, target)
    for folder, _dirs, files in os.walk(mirror, topdown=False):
        for name in files:
            path = os.path.relpath(os.path.join(folder, name), mirror)
            if path not in wanted:
                os.remove(os.path.join(folder, name))
        if folder != mirror and not os.listdir(folder):
            os.rmdir(folder)


if __name__ == "__main__":
    main(*sys.argv[1:])
