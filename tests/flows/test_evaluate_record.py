"""Issue 62, item 5: ``pep evaluate --data OTHER.zarr`` replaced the run's ``metrics.json`` with the other
store's scores: the training record (steps, converged, seconds, data path) was gone, and nothing said which
data was scored. Now an evaluation of other data is its own record, ``evaluations/<data>-<checksum>.json``
(its reliability diagram beside it), naming the data it scored; one of the training data keeps the
training record's fields in ``metrics.json`` and refreshes its held-out metrics."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest
from typer.testing import CliRunner

from pep_gp.flows.cli import app
from pep_gp.pipeline.data.stores import open_store
from tests import datafiles

TRAINING_RECORD = ("model", "data", "steps", "epochs", "converged", "seconds", "energy", "notes")


def run(*args):
    """``pep ARGS`` in this process."""
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.mark.heavy  # seconds of compiling: the README's tier keeps its time
def test_evaluating_other_data_keeps_the_training_record(messy_classifier, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(messy_classifier.run_dir, run_dir)
    trained = json.loads((run_dir / "metrics.json").read_text())
    datafiles.write_messy_csv(tmp_path / "other.csv", n_rows=200, seed=3)
    ingested = run("ingest", "csv", "--input", tmp_path / "other.csv", "--target", "bought", "--sep", ";", "--id", "id",
                   "--na", "mean", "--out", tmp_path / "other.zarr", "--quiet")
    assert ingested.exit_code == 0, ingested.output
    checksum = open_store(tmp_path / "other.zarr").checksum

    result = run("evaluate", "--run-dir", run_dir, "--data", tmp_path / "other.zarr", "--json")
    assert result.exit_code == 0, result.output
    scored = json.loads(result.stdout)
    record = run_dir / "evaluations" / f"other.zarr-{checksum.removeprefix('sha256:')[:16]}.json"
    assert scored["record"] == str(record) and json.loads(record.read_text()) == scored
    assert scored["scored_data"] == str(tmp_path / "other.zarr") and scored["scored_checksum"] == checksum
    assert scored["training_data"] is False and scored["n_test"] == 40
    assert scored["reliability_plot"] == str(record.with_suffix(".png")) and record.with_suffix(".png").exists()
    assert json.loads((run_dir / "metrics.json").read_text()) == trained  # untouched

    table = run("evaluate", "--run-dir", run_dir, "--input", tmp_path / "other.csv", "--sep", ";", "--json")
    assert table.exit_code == 0, table.output
    by_table = json.loads(table.stdout)
    digest = hashlib.sha256((tmp_path / "other.csv").read_bytes()).hexdigest()
    assert by_table["record"] == str(run_dir / "evaluations" / f"other.csv-{digest[:16]}.json")
    assert by_table["scored_checksum"] == f"sha256:{digest}" and by_table["training_data"] is False
    assert json.loads((run_dir / "metrics.json").read_text()) == trained

    own = json.loads(run("evaluate", "--run-dir", run_dir, "--json").stdout)
    assert own["record"] == str(run_dir / "metrics.json") and own["training_data"] is True
    kept = json.loads((run_dir / "metrics.json").read_text())
    assert {key: kept[key] for key in TRAINING_RECORD} == {key: trained[key] for key in TRAINING_RECORD}
    assert kept["test_nll"] == own["test_nll"] and kept["scored_data"] == str(messy_classifier.store)
