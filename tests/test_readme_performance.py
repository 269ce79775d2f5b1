"""The README's Performance tables are those that ``benchmarks.compare`` prints from its committed results
(claims equal checks: editing a number in the README, or re-running the benchmark without updating the
README, fails here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.compare import markdown

ROOT = Path(__file__).resolve().parents[1]
RUNS = sorted((ROOT / "benchmarks" / "results").glob("compare*.json"))


def test_there_are_committed_comparison_runs():
    assert {path.stem for path in RUNS} >= {"compare_gpu", "compare_gpu_cache2000"}


@pytest.mark.parametrize("path", RUNS, ids=[path.stem for path in RUNS])
def test_the_readme_holds_the_table_of_each_comparison_run(path):
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Performance"):readme.index("## Benchmarks")]
    assert markdown(json.loads(path.read_text())) in section
