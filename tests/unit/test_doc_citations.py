"""What the code and docs/DESIGN.md cite exists.

- Every ``docs/<file>.md`` and ``spec/<file>.py`` that a module of trionsq/ or spec/ names is in
  the repository, and every section it cites by number (``docs/protocol.md §1.3, §12``,
  ``docs/replication.md section 8``, ``sections 7 to 9``) is a heading of that file.
- Every ``*.py`` that docs/DESIGN.md names is a file of the repository.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("trionsq", "spec")

_CITATION = re.compile(r"\b((?:docs/[\w.-]+\.md)|(?:spec/[\w/.-]+\.py))")
#: What follows a document's name and cites its sections: ``§1.3, §12`` or ``section(s) N``.
_SECTIONS = re.compile(
    r"\A(?:[\s,;(]|and)*"
    r"((?:§\s?\d+(?:\.\d+)*(?:[\s,;]|and)*)+|sections?\s+\d+(?:\s+(?:to|and)\s+\d+)?)"
)
#: Files DESIGN.md names that belong to other projects.
EXTERNAL = {"h11/_state.py"}


def citations() -> list[tuple[str, str, list[str]]]:
    """(where, the cited file, the sections cited) for every citation in the sources."""
    found = []
    for top in SOURCES:
        for path in sorted((ROOT / top).rglob("*.py")):
            text = path.read_text()
            for match in _CITATION.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                cited = match.group(1).rstrip(".")
                after = _SECTIONS.match(text[match.end() : match.end() + 80])
                sections: list[str] = []
                if after:
                    cite = after.group(1)
                    if cite.startswith("section"):
                        numbers = [int(n) for n in re.findall(r"\d+", cite)]
                        if " to " in cite:
                            numbers = list(range(numbers[0], numbers[-1] + 1))
                        sections = [str(n) for n in numbers]
                    else:
                        sections = re.findall(r"§\s?(\d+(?:\.\d+)*)", cite)
                found.append((f"{path.relative_to(ROOT)}:{line}", cited, sections))
    return found


def headings(path: Path) -> set[str]:
    """The section numbers of a Markdown file's headings (``## 6. Storage``: ``6``)."""
    return set(re.findall(r"^#{1,6}\s+(\d+(?:\.\d+)*)[.\s]", path.read_text(), re.M))


def test_cited_files_and_sections_exist() -> None:
    wrong = []
    for where, cited, sections in citations():
        path = ROOT / cited
        if not path.is_file():
            wrong.append(f"{where}: {cited} does not exist")
            continue
        if sections:
            have = headings(path)
            for section in sections:
                if section not in have:
                    wrong.append(f"{where}: {cited} has no section {section}")
    assert not wrong, "citations of missing documents or sections:\n" + "\n".join(wrong)


def test_no_citation_of_documents_outside_the_repository() -> None:
    wrong = []
    for top in SOURCES:
        for path in sorted((ROOT / top).rglob("*.py")):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if re.search(r"nsq-reference|\breference §", line):
                    wrong.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not wrong, "cite docs/protocol.md instead:\n" + "\n".join(wrong)


def test_the_protocol_doc_has_an_anchor_per_section() -> None:
    text = (ROOT / "docs" / "protocol.md").read_text()
    for section in headings(ROOT / "docs" / "protocol.md"):
        assert f'<a id="s{section}"></a>' in text, f"docs/protocol.md §{section} has no anchor"


def test_modules_named_in_design_exist() -> None:
    files = {p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*.py") if ".venv" not in p.parts}
    named = set(re.findall(r"[\w/.-]*\w\.py\b", (ROOT / "docs" / "DESIGN.md").read_text()))
    missing = [
        name
        for name in sorted(named - EXTERNAL)
        if not any(f == name or f.endswith("/" + name) for f in files)
    ]
    assert not missing, f"docs/DESIGN.md names modules that do not exist: {missing}"
