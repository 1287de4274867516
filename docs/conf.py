"""Sphinx configuration of fuse's documentation (MyST Markdown, the furo theme).

Build it with ``bash scripts/docs.sh`` (warnings are errors), or by hand:
``python -m sphinx -W --keep-going -b html docs docs/_build/html``.
"""

from __future__ import annotations

import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "_ext"))

project = "fuse"
author = "the fuse authors"
copyright = "the fuse authors"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "fuse_reference",          # _ext/fuse_reference.py: the generated configuration/CLI tables
]

source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "README.md", "_snippets"]  # snippets are included by pages
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

html_theme = "furo"
html_title = "fuse"
html_static_path = ["_static"]

# The API reference imports fuse's modules.  A framework that is not installed where the docs
# are built (TensorFlow and MXNet each need an environment of their own, see Install) is
# replaced by a mock, so that its fuse module imports and its docstrings are read all the same.
OPTIONAL_FRAMEWORKS = ["tensorflow", "keras", "mxnet", "torch", "ray", "pyspark", "pyarrow",
                       "lightning", "lightning_fabric", "lightning_utilities", "pytorch_lightning",
                       "cupy", "mpi4py", "ml_dtypes", "optuna", "scipy"]
autodoc_mock_imports = [m for m in OPTIONAL_FRAMEWORKS if importlib.util.find_spec(m) is None]

autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_inherit_docstrings = True
# fuse's docstrings are plain reStructuredText without Google/NumPy sections; napoleon is there
# for the few that use "Args:" blocks.
napoleon_google_docstring = True
napoleon_numpy_docstring = False

nitpicky = False
suppress_warnings = ["myst.header"]
