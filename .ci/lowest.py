"""Print pip constraints that pin each of pep's direct dependencies (and the extras named on the command line)
to the lowest version pyproject.toml allows: ``python3 .ci/lowest.py test > lowest.txt`` then
``pip install -c lowest.txt -e ".[test]"``. Indirect dependencies resolve to their newest compatible release
(uv's ``--resolution lowest-direct``). A requirement without a lower bound is an error: it could not be
tested at its lowest."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

LOWER = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(?:[^;]*?)(?:>=|==)\s*([^,;\s]+)")


def lowest(requirements: list[str]) -> list[str]:
    """``name==lower`` for each requirement string (PEP 508), in order."""
    pins = []
    for requirement in requirements:
        match = LOWER.match(requirement)
        if match is None:
            raise SystemExit(f"pyproject.toml: {requirement!r} has no lower bound (>= or ==)")
        pins.append(f"{match.group(1)}=={match.group(2)}")
    return pins


def main(extras: list[str]) -> None:
    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in extras:
        requirements += project["optional-dependencies"][extra]
    print("\n".join(dict.fromkeys(lowest(requirements))))


if __name__ == "__main__":
    main(sys.argv[1:])
