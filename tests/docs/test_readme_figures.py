"""Every measured figure README.md quotes (a ratio such as 0.57x, a time in µs, the benchmark's
run time in minutes) appears in bench/RESULTS.md, where it has its setting and raw data."""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIGURE = re.compile(r"\b\d+\.\d+x\b|\b\d+(?:\.\d+)? µs\b|\b\d+(?:\.\d+)? min\b")


def _read(*path):
    with open(os.path.join(ROOT, *path), encoding="utf-8") as f:
        return f.read()


def test_readme_figures_are_in_bench_results():
    readme, results = _read("README.md"), _read("bench", "RESULTS.md")
    figures = set(FIGURE.findall(readme))
    assert len(figures) >= 10, figures              # the pattern still finds them
    missing = sorted(f for f in figures if f not in results)
    assert not missing, f"README.md figures not in bench/RESULTS.md: {missing}"
