"""The generated references cover every setting and flag fuse has.

The configuration reference is generated from ``fuse.config.Config`` and
``fuse.config.OTHER_SETTINGS`` (docs/_ext/fuse_reference.py), so a variable read anywhere else
would be missing from it: every ``"FUSE_..."`` string literal in fuse's Python and Cython
sources must name a documented variable.  The fuserun reference is generated from the parser
itself, so every flag is in it; here it is checked that every flag has a help text to show.
"""

import argparse
import pathlib
import re

from fuse.common.ignored_knobs import IGNORED
from fuse.config import OTHER_SETTINGS, Config
from fuse.runner.agent import make_parser as agent_parser
from fuse.runner.launch import make_parser

ROOT = pathlib.Path(__file__).resolve().parents[2]
# a whole quoted variable name, as code passes it to os.environ / env.get
_VARIABLE = re.compile(r"""["'](FUSE_[A-Z][A-Z0-9_]*)["']""")


def _documented() -> set[str]:
    return ({name for name, _alias, _default, _doc in Config.describe()}
            | {s.name for s in OTHER_SETTINGS} | {"FUSE_" + k for k in IGNORED})


def _sources():
    """fuse's Python and Cython sources, but config.py: its literals are the registry itself."""
    config = ROOT / "fuse" / "config.py"
    return [p for p in (ROOT / "fuse").rglob("*") if p.suffix in (".py", ".pyx") and p != config]


def test_every_variable_fuse_reads_is_in_the_configuration_reference():
    read = {}
    for path in _sources():
        for name in _VARIABLE.findall(path.read_text(encoding="utf-8")):
            read.setdefault(name, path.relative_to(ROOT))
    assert len(read) >= 20, read                  # the pattern still finds them
    missing = {name: str(where) for name, where in read.items() if name not in _documented()}
    assert not missing, ("read in fuse/ but neither a fuse.config.Config knob nor in "
                         f"fuse.config.OTHER_SETTINGS: {missing}")


def test_every_other_setting_is_read_somewhere():
    sources = "".join(p.read_text(encoding="utf-8") for p in _sources())
    unread = [s.name for s in OTHER_SETTINGS if s.name not in sources]
    assert not unread, f"OTHER_SETTINGS lists variables no code reads: {unread}"


def test_every_flag_has_help_for_the_reference():
    for parser in (make_parser(), agent_parser({})):
        for action in parser._actions:
            if action.option_strings and not isinstance(action, argparse._HelpAction):
                assert action.help, f"{parser.prog} {action.option_strings} has no help text"
