"""From a user's own table to predictions with the ``pep`` command line: a messy CSV through ``pep ingest``,
``pep train`` and ``pep predict`` (subprocesses, as users run them), and every bad input of a table as one
line on stderr with exit code 2 and nothing left behind."""

from __future__ import annotations

import json
import re

import jax
import numpy as np
import pandas as pd
import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
from typer.testing import CliRunner

from pep_gp.flows.cli import app
from pep_gp.flows.predict import predict_flow
from pep_gp.flows.reports import artifact_key
from pep_gp.pipeline.runs import checkpoint
from pep_gp.pipeline.runs.run import load_run
from tests import datafiles
from tests.messy_runs import pep


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_a_messy_csv_from_ingest_to_predictions_of_yes_and_no(messy_classifier, tmp_path):
    out = tmp_path / "predictions.csv"
    summary = json.loads(pep("predict", "--run-dir", messy_classifier.run_dir, "--input", messy_classifier.new_csv,
                             "--sep", ";", "--out", out, "--json").stdout)
    predictions = pd.read_csv(out)
    assert list(predictions.columns) == ["id", "label", "proba_no", "proba_yes"] and summary["rows"] == 50
    assert predictions["id"].tolist() == messy_classifier.new_ids
    assert set(predictions["label"]) <= {"yes", "no"} and len(set(predictions["label"])) == 2
    probabilities = predictions[["proba_no", "proba_yes"]].to_numpy()
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    assert (predictions["label"] == np.where(probabilities[:, 1] > 0.5, "yes", "no")).all()


def test_the_predict_summary_is_one_line_however_narrow_the_terminal(messy_classifier, tmp_path):
    """Rich wrapped it at 80 columns where stdout is no terminal, splitting the column names over two lines."""
    result = run("predict", "--run-dir", messy_classifier.run_dir, "--input", messy_classifier.new_csv, "--sep", ";",
                 "--out", tmp_path / "predictions.csv")
    assert result.exit_code == 0, result.output
    assert re.fullmatch(r"predicted 50 rows of \S+ into \S+predictions\.csv \(id, label, proba_no, proba_yes\) in "
                        r"[0-9.]+ s\n", result.stdout), result.stdout


@pytest.mark.exhaustive
@pytest.mark.slow  # a second `pep train` (~30 s)
def test_a_messy_csv_from_ingest_to_predictions_of_a_number_with_intervals(messy_regressor, tmp_path):
    out = tmp_path / "predictions.parquet"
    pep("predict", "--run-dir", messy_regressor.run_dir, "--input", messy_regressor.new_csv, "--sep", ";",
        "--out", out, "--interval", "0.9", "--quiet")
    predictions = pd.read_parquet(out)
    assert list(predictions.columns) == ["id", "mean", "std", "lower_0.9", "upper_0.9"]
    assert predictions["id"].tolist() == messy_regressor.new_ids
    assert (predictions["std"] > 0).all() and (predictions["lower_0.9"] < predictions["mean"]).all()
    np.testing.assert_allclose(predictions["upper_0.9"] - predictions["mean"], 1.6448536269514722 * predictions["std"],
                               rtol=1e-12)


def run(*args):
    """``pep ARGS`` in this process."""
    return CliRunner().invoke(app, [str(a) for a in args])


def write_bad_inputs(directory):
    datafiles.write_messy_csv(directory / "t.csv", n_rows=40)
    (directory / "many.csv").write_text("a;name;bought\n" + "".join(f"{i};n{i};{'yes' if i % 2 else 'no'}\n"
                                                                   for i in range(60)))
    (directory / "one-class.csv").write_text("a;bought\n1;yes\n2;yes\n3;yes\n")
    (directory / "truncated.csv").write_text("a;bought\n1;yes\n2;no\n3")
    (directory / "broken.csv.gz").write_bytes(b"\x1f\x8b\x08\x00 not really gzip")


@pytest.mark.parametrize(("args", "message"), [
    (["--target", "bougt"], "t.csv: no column 'bougt' (the --target column); columns are id, age, city, income, "
                            "bought (did you mean 'bought'?)"),
    (["--target", "bought", "--drop", "cty"], "t.csv: no column 'cty' (the --drop column); columns are id, age, "
                                              "city, income, bought (did you mean 'city'?)"),
    (["--input", "{tmp}/many.csv", "--target", "bought"],
     "many.csv, column 'name': 60 distinct text values, more than --max-categories 50"),
    (["--input", "{tmp}/one-class.csv", "--target", "bought"],
     "one-class.csv, column 'bought': expected at least 2 classes, found 1 ('yes': 3 rows)"),
    (["--target", "bought", "--na", "fail"], "t.csv: line 5, column 'age': missing value (--na fail)"),
    (["--input", "{tmp}/truncated.csv", "--target", "bought"],
     "truncated.csv: line 4 has 1 field, expected 2 as in the header (a truncated row?)"),
    (["--input", "{tmp}/broken.csv.gz", "--target", "bought"], "broken.csv.gz: unreadable or truncated file"),
    (["--target", "bought", "--sep", ","], "t.csv: read as a single column 'id;age;city;income;bought' with "
                                           "--sep ','; the header holds ';': pass --sep ';'"),
])
def test_bad_tables_fail_with_one_line_and_exit_code_2(tmp_path, args, message):
    write_bad_inputs(tmp_path)
    before = datafiles.listing(tmp_path)
    options = {"--input": str(tmp_path / "t.csv"), "--sep": ";"}
    options.update({key: value.format(tmp=tmp_path) for key, value in zip(args[::2], args[1::2])})
    result = run("ingest", "csv", *sum(options.items(), ()), "--out", tmp_path / "s.zarr")
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert result.stderr.count("\n") == 1 and message in result.stderr and "Traceback" not in result.stderr
    assert datafiles.listing(tmp_path) == before


def test_a_predict_input_without_a_feature_column_fails_with_one_line(messy_classifier, tmp_path):
    table = pd.read_csv(messy_classifier.new_csv, sep=";").drop(columns="income")
    table.to_csv(tmp_path / "new.csv", sep=";", index=False)
    result = run("predict", "--run-dir", messy_classifier.run_dir, "--input", tmp_path / "new.csv", "--sep", ";",
                 "--out", tmp_path / "p.csv")
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
    assert "new.csv: no column 'income' (a feature of the run); columns are id, age, city" in result.stderr
    assert datafiles.listing(tmp_path) == {"new.csv"}


def test_a_category_never_seen_in_training_predicts_with_a_warning(messy_classifier, tmp_path):
    table = pd.read_csv(messy_classifier.new_csv, sep=";")
    table.loc[[0, 4, 9], "city"] = ["Rome", "Rome", "Oslo"]
    table.to_csv(tmp_path / "new.csv", sep=";", index=False)
    result = run("predict", "--run-dir", messy_classifier.run_dir, "--input", tmp_path / "new.csv", "--sep", ";",
                 "--out", tmp_path / "p.csv", "--quiet")
    assert result.exit_code == 0, result.output
    assert result.stderr == ("pep predict: warning: column 'city': 3 rows hold values never seen in training "
                             "('Rome', 'Oslo'); their one-hot columns are all 0\n")
    assert len(pd.read_csv(tmp_path / "p.csv")) == 50


@pytest.mark.usefixtures("prefect_harness")
def test_the_predict_flow_runs_under_prefect_and_publishes_its_summary(messy_classifier, tmp_path):
    summary = predict_flow(str(messy_classifier.run_dir), str(messy_classifier.new_csv), str(tmp_path / "p.csv"),
                           sep=";")
    assert summary["rows"] == 50 and len(pd.read_csv(tmp_path / "p.csv")) == 50
    key = artifact_key("predict", messy_classifier.run_dir)
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))
    assert artifacts and "| rows | 50 |" in artifacts[0].data


def test_a_checkpoint_with_nan_params_is_refused_before_anything_is_written(messy_classifier, tmp_path):
    """Issue 37, item 4: a checkpoint whose params hold a NaN (its digests consistent) was predicted as empty
    probabilities with exit 0; now it is refused, naming the checkpoint and the parameter."""
    trained = load_run(messy_classifier.run_dir)
    leaves, tree = jax.tree_util.tree_flatten(jax.tree_util.tree_map(np.array, trained.trees["params"]))
    leaves[0].flat[0] = np.nan
    meta = {key: value for key, value in trained.meta.items() if key not in ("format", "step", "leaves")}
    saved = checkpoint.save(tmp_path / "run", trained.step, {"params": tree.unflatten(leaves)}, meta, keep=1)
    result = run("predict", "--run-dir", tmp_path / "run", "--input", messy_classifier.new_csv, "--sep", ";",
                 "--out", tmp_path / "p.csv")
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
    assert f"{saved}: parameter " in result.stderr and "holds 1 non-finite values" in result.stderr
    assert not (tmp_path / "p.csv").exists() and [p.name for p in tmp_path.iterdir()] == ["run"]
