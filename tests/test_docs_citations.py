"""The code and the docs cite docs/ by file, heading anchor or quoted section name ("docs/audit.md#performance",
"docs/cli.md, "Where the requests live"", "docs/audit.md, execute, "Throttle""). A section moved or renamed leaves
its citations pointing at nothing, and nothing else notices: this finds every citation in the repository's Python and
Markdown files and checks that its file exists, its anchor is one of that file's headings (as GitHub makes them),
and its quoted name is in that file's text."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# A citation: the file, an optional #anchor, then optionally ", [one word,] "quoted name"".
CITATION = re.compile(r'docs/([\w-]+\.md)(#[\w-]+)?(?:,\s*(?:[\w`-]+,\s*)?"([^"\n]+)")?')


@dataclass(frozen=True)
class Citation:
    source: str
    doc: str
    anchor: str | None
    quoted: str | None


def joined(text: str) -> str:
    """`text` with its lines joined as a reader reads a wrapped comment or docstring: a line ending in a hyphen
    (an anchor cut at the margin) runs on into the next, other lines with a space; comment markers and indentation
    at the start of the next line are dropped."""
    text = re.sub(r"-\n\s*(?:#\s*)?", "-", text)
    return re.sub(r"\n\s*(?:#\s*)?", " ", text)


def citations(source: str, text: str) -> list[Citation]:
    return [Citation(source, m.group(1), m.group(2)[1:] if m.group(2) else None,
                     " ".join(m.group(3).split()) if m.group(3) else None)
            for m in CITATION.finditer(joined(text))]


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, everything but letters, digits, '_', '-' and spaces
    dropped, spaces made hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def problems(found: list[Citation], docs: dict[str, str]) -> list[str]:
    """What is wrong with each citation against `docs` (file name -> text)."""
    out = []
    for c in found:
        text = docs.get(c.doc)
        if text is None:
            out.append(f"{c.source}: docs/{c.doc} does not exist")
            continue
        anchors = {slug(m.group(1)) for m in re.finditer(r"^#+ (.*)$", text, re.M)}
        if c.anchor is not None and c.anchor not in anchors:
            out.append(f"{c.source}: docs/{c.doc} has no heading #{c.anchor}")
        if c.quoted is not None and c.quoted not in " ".join(text.split()):
            out.append(f'{c.source}: docs/{c.doc} has no "{c.quoted}"')
    return out


def _repository() -> tuple[list[Citation], dict[str, str]]:
    tracked = subprocess.run(["git", "ls-files", "*.py", "*.md"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    # This file's probes below point at nothing on purpose.
    mine = Path(__file__).resolve().relative_to(ROOT).as_posix()
    found = [c for name in tracked if name != mine for c in citations(name, (ROOT / name).read_text(encoding="utf-8"))]
    docs = {p.name: p.read_text(encoding="utf-8") for p in (ROOT / "docs").glob("*.md")}
    return found, docs


def test_every_citation_of_docs_in_the_repository_points_at_something() -> None:
    found, docs = _repository()
    assert len(found) > 200  # the scan finds the citations at all (there were about 300 when this was written)
    assert {c.doc for c in found} >= {"audit.md", "cli.md", "kafka-compat.md", "forecast-performance.md"}
    assert problems(found, docs) == []


@pytest.mark.parametrize(("text", "wrong"), [
    ("see docs/nowhere.md", "docs/nowhere.md does not exist"),
    ("(docs/cli.md#where-the-requests-die)", "has no heading #where-the-requests-die"),
    ('(docs/audit.md, "A guessed middle")', 'has no "A guessed middle"'),
    # Wrapped at the margin inside a comment: the anchor and the quote are read whole.
    ("# (docs/cli.md#kip-435-\n# stepz)", "has no heading #kip-435-stepz"),
    ('    (docs/audit.md, "Huge\n    pagez")', 'has no "Huge pagez"'),
])
def test_a_citation_that_points_at_nothing_is_found(text: str, wrong: str) -> None:
    _, docs = _repository()
    found = citations("probe.py", text)
    assert len(found) == 1
    assert [p for p in problems(found, docs) if wrong in p], problems(found, docs)


@pytest.mark.parametrize("text", [
    "(docs/cli.md#kip-435-steps)",
    "# (docs/cli.md#kip-\n# 435-steps)",
    '(docs/forecast-performance.md, "Huge pages")',
    '(docs/audit.md, execute, "Throttle")',
    '    (docs/forecast-performance.md, "Less held at the peak, and the\n    retention settings kept")',
])
def test_a_citation_that_points_at_a_section_passes(text: str) -> None:
    _, docs = _repository()
    found = citations("probe.py", text)
    assert len(found) == 1 and problems(found, docs) == []
