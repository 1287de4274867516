# Every test module here starts with needs.module("torch"): without torch each module is
# reported as skipped with the reason (or, where FUSE_TEST_REQUIRE names torch, fails).
