import importlib.util
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

if importlib.util.find_spec("torch") is None:
    # every module here needs real torch; say so once instead of failing to import
    collect_ignore_glob = ["test_*.py"]

    def pytest_collection_modifyitems(config, items):
        pass

    @pytest.fixture(autouse=True)
    def _no_torch():
        pytest.skip("torch is not installed: tests/torch needs pip install fuse[torch]")
