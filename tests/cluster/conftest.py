# The launcher tests' fixture (tests/support/runner_util.py).
from runner_util import script  # noqa: F401
