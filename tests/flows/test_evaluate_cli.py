"""``pep evaluate --data OTHER.zarr`` in this process: another store's features are matched to the run's by
name (issue 37, item 3), as ``pep predict`` matches them."""

from __future__ import annotations

import json
import shutil

import pandas as pd
from typer.testing import CliRunner

from pep_gp.flows.cli import app


def run(*args):
    """``pep ARGS`` in this process."""
    return CliRunner().invoke(app, [str(a) for a in args])


def ingest(csv, out):
    """``pep ingest csv`` as the messy runs were ingested."""
    result = run("ingest", "csv", "--input", csv, "--target", "bought", "--sep", ";", "--id", "id", "--na", "mean",
                 "--out", out, "--quiet")
    assert result.exit_code == 0, result.output


def test_a_store_of_the_same_features_in_another_order_scores_as_the_training_store(messy_classifier, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(messy_classifier.run_dir, run_dir)  # evaluate writes metrics.json: not into the shared run
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
    run_dir = tmp_path / "run"
    shutil.copytree(messy_classifier.run_dir, run_dir)
    table = pd.read_csv(messy_classifier.train_csv, sep=";").rename(columns={"income": "salary"})
    table.to_csv(tmp_path / "other.csv", sep=";", index=False)
    ingest(tmp_path / "other.csv", tmp_path / "other.zarr")
    before = (run_dir / "metrics.json").read_text()  # pep train's
    result = run("evaluate", "--run-dir", run_dir, "--data", tmp_path / "other.zarr")
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
    assert "other.zarr: missing the run's feature 'income'; has 'salary', which the run was not trained on" \
        in result.stderr
    assert (run_dir / "metrics.json").read_text() == before
