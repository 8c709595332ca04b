"""The docs speak to a reader of this repository: no references to what that reader cannot see (the issue tracker's
numbers, a session's stops, files outside the repository such as the seed papers' paths), no broken links between
the docs, and a README short enough to be a user's guide."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# "issue 12", "issue-12", "issues 11 and 12", "stop 24", "../shared/...", "seeds/003_...", "seed 003"
UNSEEN = re.compile(r"\bissues? ?-?[0-9]+|\bstops? [0-9]+\b|\.\./shared\b|\bseeds/|\bseed 0[0-9]{2}\b", re.IGNORECASE)

DOCS = sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md")])
CODE = sorted(path for part in ("bench", "client", "deploy", "depot", "directory", "protocol", "scheduler", "tests",
                                "units")
              for path in (REPO / part).rglob("*.py") if path != Path(__file__).resolve())


def unseen_references(paths: list[Path]) -> list[str]:
    found = []
    for path in paths:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for match in UNSEEN.finditer(line):
                found.append(f"{path.relative_to(REPO)}:{number}: {match.group(0)!r}")
    return found


def test_the_pattern_finds_what_it_is_for() -> None:
    for text in ("see issue 11", "issue-40's targets", "Issues 11 and 12", "stop 24's run", "../shared/seeds",
                 "seeds/003_f46.txt", "as seed 003 plans it"):
        assert UNSEEN.search(text), text
    for text in ("seed 3569156308", "--seed 40", "a stop at 10 s", "the issue's tracker", "seeded"):
        assert not UNSEEN.search(text), text


def test_docs_refer_to_nothing_a_reader_cannot_see() -> None:
    assert unseen_references(DOCS) == []


def test_code_refers_to_nothing_a_reader_cannot_see() -> None:
    assert len(CODE) > 100
    assert unseen_references(CODE) == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_lead_to_files_of_the_repository(doc: Path) -> None:
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (doc.parent / target.split("#")[0]).resolve()
        if not path.exists() or REPO not in path.parents:
            broken.append(target)
    assert broken == []


def test_the_readme_is_a_guide_not_a_notebook() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    assert not re.search(r"`[0-9a-f]{7}`", readme), "commit hashes belong in bench/results"
