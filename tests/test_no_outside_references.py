"""No README line, documentation page, code comment or docstring cites a document that is not in the
repository (design notes, paper specs and machine notes kept outside it): they cite the papers (author,
year, section or equation) or the documentation's pages instead."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Built from pieces so that this file does not match itself.
OUTSIDE = re.compile("|".join(["DESIGN" + " §", "spec" + " §", "seed" + r"00\d", "shared" + "/", "ENVIRONMENT" + r"\.md"]))
CODE = ("src", "benchmarks", "tests", "docs")


def checked_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "pyproject.toml", ROOT / "prefect.yaml", ROOT / "mkdocs.yml"]
    files += sorted((ROOT / "docs").rglob("*.md")) + sorted(path for path in (ROOT / "infra").rglob("*") if path.is_file())
    for folder in CODE:
        files += sorted((ROOT / folder).rglob("*.py"))
    return files


def test_nothing_cites_a_document_outside_the_repository():
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}" for path in checked_files()
             for number, line in enumerate(path.read_text().splitlines(), 1) if OUTSIDE.search(line)]
    assert not found, "cite the paper or a docs page instead:\n" + "\n".join(found)


def test_the_check_reads_every_code_folder_and_would_see_a_citation():
    names = {path.relative_to(ROOT).parts[0] for path in checked_files()}
    assert set(CODE) | {"README.md", "infra"} <= names
    assert OUTSIDE.search("(" + "seed" + "001 §2.3)") and OUTSIDE.search("see " + "DESIGN" + " §4")
