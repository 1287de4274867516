# Every module here asks gpu_util.require(n) first: without n CUDA GPUs, CuPy and NCCL it is
# skipped with the reason (or fails, where FUSE_TEST_REQUIRE names gpu).  Its helpers and worker
# functions live in tests/support, on pytest's path (pyproject.toml).
