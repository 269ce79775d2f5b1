"""``pep evaluate --data OTHER.zarr`` in this process: another store's features are matched to the run's by
name (issue 37, item 3), as ``pep predict`` matches them; ``pep evaluate --input TABLE`` scores a labelled
table with the run's transformation (issue 42, item 5)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from pep_gp.flows.cli import app
from tests import datafiles


def run(*args):
    """``pep ARGS`` in this process."""
    return CliRunner().invoke(app, [str(a) for a in args])


def copy_of(run_dir, tmp_path):
    """A copy of a shared fixture run (evaluate writes metrics.json: not into the shared run)."""
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    return copy


def ingest(csv, out):
    """``pep ingest csv`` as the messy runs were ingested."""
    result = run("ingest", "csv", "--input", csv, "--target", "bought", "--sep", ";", "--id", "id", "--na", "mean",
                 "--out", out, "--quiet")
    assert result.exit_code == 0, result.output


def test_a_store_of_the_same_features_in_another_order_scores_as_the_training_store(messy_classifier, tmp_path):
    run_dir = copy_of(messy_classifier.run_dir, tmp_path)
    table = pd.read_csv(messy_classifier.train_csv, sep=";")
    table[["id", "bought", "income", "city", "age"]].to_csv(tmp_path / "reordered.csv", sep=";", index=False)
    ingest(tmp_path / "reordered.csv", tmp_path / "reordered.zarr")
    scores = []
    for data in (messy_classifier.store, tmp_path / "reordered.zarr"):
        result = run("evaluate", "--run-dir", run_dir, "--data", data, "--json")
        assert result.exit_code == 0, result.output
        scores.append({key: json.loads(result.stdout)[key] for key in ("test_error", "test_nll")})
    assert scores[0] == scores[1]


def test_a_store_of_other_features_is_refused_naming_the_missing_and_extra_ones(messy_classifier, tmp_path):
    run_dir = copy_of(messy_classifier.run_dir, tmp_path)
    table = pd.read_csv(messy_classifier.train_csv, sep=";").rename(columns={"income": "salary"})
    table.to_csv(tmp_path / "other.csv", sep=";", index=False)
    ingest(tmp_path / "other.csv", tmp_path / "other.zarr")
    before = (run_dir / "metrics.json").read_text()  # pep train's
    result = run("evaluate", "--run-dir", run_dir, "--data", tmp_path / "other.zarr")
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
    assert "other.zarr: missing the run's feature 'income'; has 'salary', which the run was not trained on" \
        in result.stderr
    assert (run_dir / "metrics.json").read_text() == before


def test_evaluate_reports_a_classifiers_calibration_and_writes_its_reliability_diagram(messy_classifier, tmp_path):
    """Issue 39, item 2: the earlier keys unchanged, Brier score, ECE (binning stated) and the bins in JSON,
    ``reliability.png`` beside ``metrics.json``, and the scalars in the text output."""
    run_dir = copy_of(messy_classifier.run_dir, tmp_path)
    result = run("evaluate", "--run-dir", run_dir, "--json")
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.stdout)
    assert {"test_error", "test_nll", "n_test", "brier", "ece", "ece_binning", "reliability"} <= metrics.keys()
    assert "15 equal-width bins" in metrics["ece_binning"] and 0 <= metrics["ece"] <= 1
    assert len(metrics["reliability"]["count"]) == 15 and sum(metrics["reliability"]["count"]) == metrics["n_test"]
    assert metrics["reliability_plot"] == str(run_dir / "reliability.png")
    assert (run_dir / "reliability.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((run_dir / "metrics.json").read_text())["ece"] == metrics["ece"]
    text = run("evaluate", "--run-dir", run_dir).stdout
    assert "ece" in text and "brier" in text and "count" not in text


def test_evaluate_reports_a_regressors_crps_and_interval_coverage(messy_regressor, tmp_path):
    run_dir = copy_of(messy_regressor.run_dir, tmp_path)
    result = run("evaluate", "--run-dir", run_dir, "--json")
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.stdout)
    assert {"rmse", "test_nll", "n_test", "crps", "coverage_50", "coverage_90", "coverage_95"} <= metrics.keys()
    assert metrics["crps"] > 0 and metrics["coverage_50"] <= metrics["coverage_90"] <= metrics["coverage_95"]
    assert not (run_dir / "reliability.png").exists()


def test_a_labelled_table_is_scored_with_the_runs_transformation(messy_classifier, tmp_path):
    run_dir = copy_of(messy_classifier.run_dir, tmp_path)
    labelled = tmp_path / "labelled.csv"
    datafiles.write_messy_csv(labelled, n_rows=50, seed=7)
    with labelled.open("a") as file:
        file.write("c9999;40;Nice;50.0;\n")  # no label: left out (so its city, never seen at ingest, is not counted)
    result = run("evaluate", "--run-dir", run_dir, "--input", labelled, "--sep", ";", "--json")
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.stdout)
    # The oracle: pep predict's probabilities of the same rows, scored by hand.
    assert run("predict", "--run-dir", run_dir, "--input", labelled, "--sep", ";", "--out", tmp_path / "p.csv",
               "--quiet").exit_code == 0
    predicted = pd.read_csv(tmp_path / "p.csv").iloc[:50]
    truth = pd.read_csv(labelled, sep=";")["bought"].iloc[:50]
    proba = np.where(truth == "yes", predicted["proba_yes"], predicted["proba_no"])
    assert (metrics["n_test"], metrics["rows_dropped"], metrics["unseen"]) == (50, 1, {})
    np.testing.assert_allclose(metrics["test_nll"], -np.mean(np.log(proba)), rtol=1e-9)
    assert metrics["test_error"] == np.mean(predicted["label"] != truth)


def test_a_labelled_table_with_a_new_label_or_no_such_column_is_refused(messy_classifier, tmp_path):
    run_dir = copy_of(messy_classifier.run_dir, tmp_path)
    labelled = tmp_path / "labelled.csv"
    datafiles.write_messy_csv(labelled, n_rows=20, seed=7)
    labelled.write_text(labelled.read_text().replace(";yes\n", ";maybe\n", 1))
    refused = run("evaluate", "--run-dir", run_dir, "--input", labelled, "--sep", ";")
    assert refused.exit_code != 0 and "expected one of the labels ['no', 'yes'], found 'maybe'" in refused.output
    missing = run("evaluate", "--run-dir", run_dir, "--input", labelled, "--sep", ";", "--target", "label")
    assert missing.exit_code != 0 and "no column 'label' (the --target column)" in missing.output
