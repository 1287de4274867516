import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# Every test module here starts with needs.module("torch"): without torch each module is
# reported as skipped with the reason (or, where FUSE_TEST_REQUIRE names torch, fails).
