"""``pep demo``, the main job on the embedded dataset, end to end as a user runs it (one epoch)."""

from __future__ import annotations

import json

import pytest

from tests.flows.test_train_cli import pep


@pytest.mark.slow
def test_demo_trains_and_beats_the_class_frequencies(tmp_path):
    report = json.loads(pep("demo", "--out", str(tmp_path / "demo"), "--epochs", "1", "--json").stdout)
    pep_row, logistic, frequencies = report["results"]
    assert report["n_test"] == 10_000 and report["epochs"] == 1 and report["steps"] == 27
    assert pep_row["model"].startswith("pep multiclass-sep (M=100 per class, 2 workers)")
    assert pep_row["test_nll"] < frequencies["test_nll"] - 0.1 and pep_row["test_error"] < frequencies["test_error"]
    assert logistic["model"] == "logistic regression"
    assert any((tmp_path / "demo" / "run" / "checkpoints").glob("step-*/manifest.json"))
