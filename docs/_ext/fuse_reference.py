"""Directives that write the configuration and command-line references from the code itself,
so that the pages cannot drift from what fuse reads:

``{fuse-config}``
    every knob of :class:`fuse.config.Config` (its variable, Horovod alias, default, accepted
    range and meaning) and every variable in :data:`fuse.config.OTHER_SETTINGS`;
``{fuse-cli} fuserun`` / ``{fuse-cli} agent``
    every flag of ``fuserun``'s argument parser (:func:`fuse.runner.launch.make_parser`) or of
    ``fuserun --agent``'s (:func:`fuse.runner.agent.make_parser`), group by group;
``{horovod-api} torch`` (tensorflow, tensorflow.keras, mxnet)
    every name of Horovod's framework module beside fuse's, checked with ``hasattr``;
``{horovod-flags}`` / ``{horovod-env}``
    every ``horovodrun`` flag and ``HOROVOD_*`` variable (``horovod_surface.py``) beside what
    fuse does with it; a flag fuserun lacks or a variable nothing explains fails the build;
``{fuse-chart-values}``
    every value of the Helm chart (``charts/fuse/values.yaml``): its default and the comment
    above it or beside it.

Each renders Markdown tables, which MyST parses in place.
"""

from __future__ import annotations

import argparse
import dataclasses

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective


def _cell(text) -> str:
    """One table cell: on one line, with the characters a pipe table would misread escaped."""
    return " ".join(str(text).split()).replace("|", "\\|") or " "


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines + [""]


def _size(value) -> str:
    """A default as written, with the byte sizes' MiB/KiB beside them."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int) and value >= 1024 and value % 1024 == 0:
        unit, amount = ("MiB", value >> 20) if value % (1 << 20) == 0 else ("KiB", value >> 10)
        return f"`{value}` ({amount} {unit})"
    return f"`{value}`" if value != "" else "unset"


def _bounds(field: dataclasses.Field) -> str:
    from fuse.config import describe_bounds  # the wording init() uses in its errors
    bounds = field.metadata.get("bounds")
    return describe_bounds(*bounds) if bounds is not None else ""


def _entry(name: str, doc: str, facts: list[str]) -> list[str]:
    """One variable as a definition-list entry: its name, then its meaning and the facts."""
    meaning = " ".join(doc.split())
    return [f"`{name}`", f": {meaning[0].upper() + meaning[1:]}. " + " ".join(facts), ""]


def config_markdown() -> list[str]:
    from fuse.config import LOG_LEVELS, OTHER_SETTINGS, STRAGGLER_POLICIES, Config
    choices = {"log_level": ", ".join(LOG_LEVELS),
               "straggler_policy": ", ".join(STRAGGLER_POLICIES),
               "hierarchical_allreduce": "1/0, true/false or auto",
               "hierarchical_allgather": "1/0, true/false or auto",
               "thread_affinity": "core numbers separated by commas"}
    types = {bool: "a boolean (1/0, true/false, yes/no, on/off)", int: "an integer",
             float: "a number", str: "text"}
    hints = __import__("typing").get_type_hints(Config)
    lines = ["### Read by every worker at `init()`", "",
             "Generated from `fuse.config.Config`.", ""]
    for f in dataclasses.fields(Config):
        if not f.metadata:
            continue
        m = f.metadata
        accepted = choices.get(f.name) or types.get(hints[f.name], "")
        if _bounds(f):
            accepted += f" {_bounds(f)}"
        facts = [f"Default: {_size(f.default)}.", f"Accepts {accepted}."]
        if m["horovod"]:
            facts.append(f"Horovod's spelling: `HOROVOD_{m['horovod']}`.")
        lines += _entry(f"FUSE_{m['env']}", m["doc"], facts)
    lines += ["### Read by the launcher, the agents or a backend", "",
              "Generated from `fuse.config.OTHER_SETTINGS`.", ""]
    for st in OTHER_SETTINGS:
        default = f"`{st.default}`" if st.default.isdigit() else (st.default or "unset")
        facts = [f"Default: {default}.", f"Read by {st.read_by}."]
        if st.horovod:
            facts.append(f"Horovod's spelling: `{st.horovod}`.")
        lines += _entry(st.name, st.doc, facts)
    return lines


def _flags(action: argparse.Action) -> str:
    names = ", ".join(f"`{o}`" for o in action.option_strings) or f"`{action.dest}`"
    if action.nargs == 0:
        return names
    metavar = action.metavar or (action.dest.upper() if action.option_strings else None)
    if isinstance(metavar, tuple):
        metavar = " ".join(metavar)
    if action.choices:
        metavar = "{" + ",".join(map(str, action.choices)) + "}"
    return f"{names} `{metavar}`" if metavar and action.option_strings else names


def cli_markdown(parser: argparse.ArgumentParser) -> list[str]:
    lines = [f"`{parser.prog}`: {parser.description}", ""]
    if parser.epilog:
        lines += [parser.epilog, ""]
    for group in parser._action_groups:          # argparse keeps its groups only here
        actions = [a for a in group._group_actions
                   if a.help != argparse.SUPPRESS and not isinstance(a, argparse._HelpAction)]
        if not actions:
            continue
        lines += [f"### {group.title}", ""]
        if group.description:
            lines += [group.description, ""]
        lines += _table(["Flag", "Meaning"], [[_flags(a), a.help or ""] for a in actions])
    return lines


def chart_values(path: str) -> list[tuple[str, str, str]]:
    """(dotted key, default, meaning) for every key of a values.yaml, in file order.  The
    meaning is the comment block right above the key (a blank line ends a block, so commented
    examples below a key belong to no key) and the comment after its value."""
    import json
    import re

    import yaml
    with open(path, encoding="utf-8") as f:
        text = f.read()
    data = yaml.safe_load(text)
    key_line = re.compile(r"^(\s*)([A-Za-z][\w-]*):(.*)$")
    rows, stack, pending = [], [], []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            pending = []
            continue
        if stripped.startswith("#"):
            pending.append(stripped.lstrip("#").strip())
            continue
        m = key_line.match(line)
        if not m:
            continue                                  # a list item or a continuation
        indent, key, rest = len(m.group(1)), m.group(2), m.group(3)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, key))
        value, _, comment = rest.partition(" #")
        doc = " ".join(pending + ([comment.strip()] if comment.strip() else []))
        pending = []
        node = data
        for _, k in stack:
            node = node[k]
        default = "" if isinstance(node, dict) and node and not value.strip() else \
            f"`{json.dumps(node)}`"
        rows.append((".".join(k for _, k in stack), default, doc))
    return rows


def chart_markdown(path: str) -> list[str]:
    return _table(["Value", "Default", "Meaning"],
                  [[f"`{key}`", default, doc] for key, default, doc in chart_values(path)])


def _parser(name: str) -> argparse.ArgumentParser:
    if name == "fuserun":
        from fuse.runner.launch import make_parser
        return make_parser()
    if name == "agent":
        from fuse.runner.agent import make_parser
        return make_parser({})
    raise ValueError(f"fuse-cli: unknown parser {name!r} (fuserun or agent)")


def _option_actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {o: a for a in parser._actions for o in a.option_strings}


def horovod_flags_markdown() -> list[str]:
    from horovod_surface import FLAG_DIFFERENCES, HOROVODRUN_FLAGS
    actions = _option_actions(_parser("fuserun"))
    missing = [f for f in HOROVODRUN_FLAGS if f not in actions]
    if missing:
        raise ValueError(f"fuserun lacks horovodrun's flags {missing}")
    rows = [[f"`{flag}`", f"`{flag}`", FLAG_DIFFERENCES.get(flag, "the same")]
            for flag in HOROVODRUN_FLAGS]
    known = {o for f in HOROVODRUN_FLAGS for o in actions[f].option_strings}
    added = [a for a in _parser("fuserun")._actions
             if a.option_strings and not set(a.option_strings) & known
             and a.help != argparse.SUPPRESS and not isinstance(a, argparse._HelpAction)]
    lines = _table(["horovodrun", "fuserun", "Difference"], rows)
    lines += ["Flags fuserun adds:", ""]
    lines += _table(["Flag", "Meaning"], [[_flags(a), a.help or ""] for a in added])
    return lines


def horovod_env_markdown() -> list[str]:
    from fuse.common.ignored_knobs import IGNORED
    from fuse.config import OTHER_SETTINGS, Config
    from horovod_surface import ENV_DIFFERENCES, ENV_NOTES, HOROVOD_ENV
    aliases = {alias: name for name, alias, _d, _doc in Config.describe() if alias}
    aliases.update({s.horovod: s.name for s in OTHER_SETTINGS if s.horovod})
    rows, unexplained = [], []
    for suffix in HOROVOD_ENV:
        var = "HOROVOD_" + suffix
        if var in aliases:
            rows.append([f"`{var}`", f"`{aliases[var]}` (either spelling)",
                         ENV_DIFFERENCES.get(suffix, "the same")])
        elif suffix in ENV_NOTES:
            rows.append([f"`{var}`", "", ENV_NOTES[suffix]])
        elif suffix in IGNORED:
            rows.append([f"`{var}`", "", f"not implemented ({IGNORED[suffix][1]}); init() names "
                         "it in a warning when set to anything but Horovod's default"])
        else:
            unexplained.append(var)
    if unexplained:
        raise ValueError(f"nothing says what fuse does with {unexplained}")
    return _table(["Horovod", "fuse", "Difference"], rows)


def horovod_api_markdown(framework: str, mocked: list[str]) -> list[str]:
    """Every name of ``horovod.<framework>`` beside ``fuse.<framework>``'s; a name fuse lacks
    fails the build.  ``mocked``: the frameworks autodoc mocks (not installed here)."""
    import importlib

    from sphinx.ext.autodoc.mock import mock

    from horovod_surface import API_ABSENT, API_DIFFERENCES, HOROVOD_API
    with mock(mocked):
        module = importlib.import_module(f"fuse.{framework}")
    missing = [n for n in HOROVOD_API[framework]
               if not hasattr(module, n) and (framework, n) not in API_ABSENT]
    if missing:
        raise ValueError(f"fuse.{framework} lacks horovod.{framework}'s {missing}")
    rows = []
    for n in HOROVOD_API[framework]:
        if (framework, n) in API_ABSENT:
            rows.append([f"`{n}`", "", API_ABSENT[(framework, n)]])
        else:
            rows.append([f"`{n}`", f"`{n}`", API_DIFFERENCES.get((framework, n), "the same")])
    return _table([f"`horovod.{framework}`", f"`fuse.{framework}`", "Difference"], rows)


class _Generated(SphinxDirective):
    """Runs ``make()`` and renders its Markdown; a ValueError (a flag, name or variable the
    reference cannot account for) becomes a build error naming it."""

    def make(self) -> list[str]:
        raise NotImplementedError

    def run(self):
        try:
            return self.render(self.make())
        except ValueError as err:
            raise self.error(str(err)) from None

    def render(self, lines: list[str]) -> list[nodes.Node]:
        container = nodes.container()
        self.state.nested_parse(StringList(lines, source="(generated)"), self.content_offset,
                                container)
        return container.children


class ConfigDirective(_Generated):
    def make(self):
        return config_markdown()


class CliDirective(_Generated):
    required_arguments = 1

    def make(self):
        return cli_markdown(_parser(self.arguments[0]))


class ChartValuesDirective(_Generated):
    def make(self):
        import os
        path = os.path.abspath(os.path.join(self.env.srcdir, os.pardir, "charts", "fuse",
                                            "values.yaml"))
        self.env.note_dependency(path)
        return chart_markdown(path)


class HorovodFlagsDirective(_Generated):
    def make(self):
        return horovod_flags_markdown()


class HorovodEnvDirective(_Generated):
    def make(self):
        return horovod_env_markdown()


class HorovodApiDirective(_Generated):
    required_arguments = 1

    def make(self):
        return horovod_api_markdown(self.arguments[0], self.env.config.autodoc_mock_imports)


def setup(app):
    app.add_directive("horovod-api", HorovodApiDirective)
    app.add_directive("horovod-flags", HorovodFlagsDirective)
    app.add_directive("horovod-env", HorovodEnvDirective)
    app.add_directive("fuse-chart-values", ChartValuesDirective)
    app.add_directive("fuse-config", ConfigDirective)
    app.add_directive("fuse-cli", CliDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
