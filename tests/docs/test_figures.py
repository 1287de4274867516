"""Every measured figure the README and the documentation quote (a ratio such as 0.47x, a time
such as 80.8 ms or 1.72 s: measurements carry decimals, settings such as "1 ms" do not) is tied
to the benchmark that produced it: the paragraph that quotes it links that benchmark's results
page (bench/results/...md), and the figure is on that page, where its setting (hardware, date,
load) and the command that reproduces it are.  Code blocks (commands, quoted log lines) are not
figures."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIGURE = re.compile(r"\b\d+\.\d+(?:x\b| (?:µs|ms|s|min)\b)")
LINK = re.compile(r"\]\(([^)\s]*bench/results/[^)\s]+\.md)\)")
PAGES = [ROOT / "README.md"] + sorted(p for p in (ROOT / "docs").rglob("*.md")
                                      if "_build" not in p.parts)


def _paragraphs(page: pathlib.Path):
    """The page's paragraphs (blank-line separated), fenced code blocks left out."""
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    return [p for p in re.split(r"\n\s*\n", text) if p.strip()]


def _figures_and_sources():
    """(page, paragraph start, figures, linked results pages) for every paragraph with figures."""
    for page in PAGES:
        for para in _paragraphs(page):
            figures = sorted(set(FIGURE.findall(para)))
            if figures:
                sources = [(page.parent / link).resolve() for link in LINK.findall(para)]
                yield page.relative_to(ROOT), para.strip()[:80], figures, sources


def test_the_readme_quotes_a_figure():
    quoted = [f for page, _p, f, _s in _figures_and_sources() if str(page) == "README.md"]
    assert quoted, "the README's figure (and this test's pattern) went missing"


def test_every_figure_links_the_results_page_it_comes_from():
    problems = []
    for page, para, figures, sources in _figures_and_sources():
        if not sources:
            problems.append(f"{page}: '{para}...' quotes {figures} and links no bench/results page")
            continue
        missing = [f for f in figures
                   if not any(s.exists() and f in s.read_text(encoding="utf-8") for s in sources)]
        if missing:
            problems.append(f"{page}: '{para}...': {missing} not on {[s.name for s in sources]}")
    assert not problems, "\n".join(problems)
