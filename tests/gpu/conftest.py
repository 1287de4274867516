import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(os.path.dirname(HERE), "support"),
                os.path.join(os.path.dirname(HERE), "torch")]

# Every module here asks gpu_util.require(n) first: without n CUDA GPUs, CuPy and NCCL it is
# skipped with the reason (or fails, where FUSE_TEST_REQUIRE names gpu).
