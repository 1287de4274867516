import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# Every test module here starts with pytest.importorskip("tensorflow", reason=...): TensorFlow
# lives in its own environment (.venv-tf, made by scripts/test_tensorflow.sh), and in the main
# .venv these tests are reported as skipped with that reason.
