"""The README's deep-GP comparison table is the one ``benchmarks.bench_dgp --table`` prints from the committed
results, both libraries scored by both rules; its paired differences are those of the stored splits."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.bench_dgp import README_RESULTS, paired, table

ROOT = Path(__file__).resolve().parents[1]
RESULTS = [json.loads((ROOT / "benchmarks" / "results" / f"{name}.json").read_text()) for name in README_RESULTS]


def test_the_readme_holds_the_table_of_the_committed_deep_gp_runs():
    assert table(RESULTS) in (ROOT / "README.md").read_text()


def test_the_table_states_both_rules_for_both_libraries():
    header = table(RESULTS).splitlines()[0]
    assert "Gaussian" in header and "mixture of 100" in header
    for result in RESULTS:
        for row in result["rows"]:
            assert np.isfinite(row["test_ll"]) and np.isfinite(row["test_ll_mixture"])


@pytest.mark.parametrize("index", range(len(README_RESULTS)))
def test_the_committed_paired_differences_are_those_of_the_stored_splits(index):
    assert paired(RESULTS[index]["rows"]) == RESULTS[index]["paired"]
