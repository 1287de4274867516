"""``python -m fuse``: the environment report of :mod:`fuse.info`."""

import sys

from fuse.info import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
