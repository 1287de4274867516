import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# Every module here needs real TensorFlow, which lives in its own environment (.venv-tf, made
# by scripts/test_tensorflow.sh); elsewhere the whole directory skips with the reason.
pytest.importorskip("tensorflow", reason="tests/tensorflow needs TensorFlow: run "
                    "scripts/test_tensorflow.sh (it makes .venv-tf)")
