"""The README's Quantile Propagation table is the one ``benchmarks.bench_qp --summarise`` prints from the
committed results, and its corrected standard error is the corrected resampled t-test's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.bench_qp import corrected_standard_error, summarise, table

ROOT = Path(__file__).resolve().parents[1]
RESULTS = json.loads((ROOT / "benchmarks" / "results" / "bench_qp.json").read_text())


def test_the_readme_holds_the_table_of_the_committed_qp_run():
    assert table(RESULTS) in (ROOT / "README.md").read_text()


def test_the_committed_summaries_are_those_of_the_committed_folds():
    for data in RESULTS["classification"].values():
        assert summarise(data["folds"], ["nll", "error"]) == data["summary"]


def test_corrected_standard_error_adds_the_shared_training_rows_term():
    """Nadeau & Bengio's ``√((1/J + 1/(k − 1))·s²)``: by hand for J = 4 differences of 2-fold CV, and
    √(1 + J/(k − 1)) times the plain standard error for 10 repeats of 10-fold CV."""
    assert corrected_standard_error([1.0, 2.0, 3.0, 4.0], 2) == pytest.approx(np.sqrt((0.25 + 1.0) * 5 / 3), rel=1e-14)
    differences = np.random.default_rng(0).normal(size=100)
    plain = differences.std(ddof=1) / 10
    assert corrected_standard_error(differences, 10) == pytest.approx(plain * np.sqrt(1 + 100 / 9), rel=1e-12)
