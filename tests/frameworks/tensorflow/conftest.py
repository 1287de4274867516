# Every test module here starts with needs.module("tensorflow"): TensorFlow lives in its own
# environment (.venv-tf, made by scripts/test_tensorflow.sh), and in the main .venv these tests
# are reported as skipped with that reason.  In .venv-tf the script sets
# FUSE_TEST_REQUIRE=tensorflow, so a TensorFlow that does not import there fails them.
