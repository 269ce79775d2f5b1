"""Predictions of trained runs on new tables (:mod:`pep_gp.pipeline.runs.predict`): checked against the model's
predictive on rows transformed independently with pandas, equal across output formats and between this
process and a 2-worker cluster, streamed, and written atomically."""

from __future__ import annotations

import csv
import errno
import os
import subprocess
import sys
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zarr

from pep_gp.core import float64
from pep_gp.pipeline.data.ingest import ingest
from pep_gp.pipeline.data.predictions import chunk_ids, open_input, open_output
from pep_gp.pipeline.data.sources import SourceRequest, open_source
from pep_gp.pipeline.data.sources.base import BLOCK_ROWS
from pep_gp.pipeline.data.stores import open_store
from pep_gp.pipeline.errors import InputError
from pep_gp.pipeline.models import MODELS
from pep_gp.pipeline.models.collapsed import COLLAPSED
from pep_gp.pipeline.runs.predict import load_predictor, predict
from pep_gp.pipeline.runs.config import TrainConfig
from pep_gp.pipeline.runs.manifest import RunManifest
from pep_gp.pipeline.runs.run import bound_model, load_run
from pep_gp.pipeline.training.trainer import TrainJob, train
from pep_gp.pipeline.data.blocks import TargetScaling
from tests import datafiles

SMALL = TrainConfig(model={"num_inducing": 8}, epochs=1, batch_size=1000)


@pytest.fixture
def classifier(messy_classifier) -> Path:
    return messy_classifier.run_dir


@pytest.fixture
def regressor(messy_regressor) -> Path:
    return messy_regressor.run_dir


def oracle(run_dir: Path, table: pd.DataFrame) -> dict:
    """The model's predictive on the table's rows transformed by hand: the run's mean fill for age,
    one-hot city columns in sorted order, income less its offset, standardised with the run's training
    statistics."""
    manifest = load_run(run_dir).meta
    record = manifest["transforms"]
    age = table["age"].fillna(record["features"][0]["fill"])
    income = table["income"] - record["features"][4]["offset"]
    x = np.column_stack([age, *(table["city"] == c for c in ("Lyon", "Nice", "Paris")), income])
    x = (x - np.asarray(manifest["x_mean"])) / np.asarray(manifest["x_std"])
    spec, _, model = bound_model(RunManifest.of(manifest))
    with float64():
        out = spec.predictive(model, TargetScaling(**manifest["targets"]))(load_run(run_dir).trees["params"], x)
    return {k: np.asarray(v) for k, v in out.items()}


@pytest.mark.heavy
def test_classifier_predictions_are_the_models_in_the_users_labels(classifier, tmp_path):
    new = classifier.parent / "new.csv"
    summary = predict(classifier, new, tmp_path / "p.csv", sep=";")
    out = pd.read_csv(tmp_path / "p.csv")
    assert list(out.columns) == ["id", "label", "proba_no", "proba_yes"] == summary.columns and summary.rows == 50
    table = pd.read_csv(new, sep=";")
    assert out["id"].tolist() == table["id"].tolist()
    probabilities = out[["proba_no", "proba_yes"]].to_numpy()
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(probabilities, np.exp(oracle(classifier, table)["log_proba"]), rtol=1e-12, atol=1e-15)
    assert out["label"].tolist() == np.where(probabilities[:, 1] > probabilities[:, 0], "yes", "no").tolist()


@pytest.mark.exhaustive
@pytest.mark.slow  # trains a second run (~30 s); the classifier's tests cover the rest
def test_regressor_predictions_mean_std_and_intervals(regressor, tmp_path):
    new = regressor.parent / "new.csv"
    predict(regressor, new, tmp_path / "p.parquet", sep=";", intervals=(0.9, 0.5))
    out = pd.read_parquet(tmp_path / "p.parquet")
    assert list(out.columns) == ["id", "mean", "std", "lower_0.9", "upper_0.9", "lower_0.5", "upper_0.5"]
    expected = oracle(regressor, pd.read_csv(new, sep=";"))
    np.testing.assert_allclose(out["mean"], expected["mean"], rtol=1e-12)
    np.testing.assert_allclose(out["std"] ** 2, expected["var"], rtol=1e-12)
    for level in (0.9, 0.5):
        z = NormalDist().inv_cdf((1 + level) / 2)
        np.testing.assert_allclose(out[f"upper_{level}"] - out["mean"], z * out["std"], rtol=1e-12)
        np.testing.assert_allclose(out["mean"] - out[f"lower_{level}"], z * out["std"], rtol=1e-12)


def test_csv_parquet_and_zarr_outputs_hold_the_same_values(classifier, tmp_path):
    new = classifier.parent / "new.csv"
    for name in ("p.csv", "p.parquet", "p.zarr"):
        predict(classifier, new, tmp_path / name, sep=";")
    csv, parquet = pd.read_csv(tmp_path / "p.csv"), pd.read_parquet(tmp_path / "p.parquet")
    group = zarr.open_group(str(tmp_path / "p.zarr"), mode="r")
    assert group.attrs["columns"] == list(csv.columns) and group.attrs["rows"] == 50
    for column in csv.columns:
        assert csv[column].tolist() == parquet[column].tolist() == group[column][:].tolist()


@pytest.mark.heavy
def test_a_cluster_of_two_workers_gives_the_same_bits_as_this_process(classifier, cluster, tmp_path):
    new, store = classifier.parent / "new.csv", classifier.parent / "s.zarr"
    for name, backend in (("here", None), ("cluster", cluster)):
        predict(classifier, new, tmp_path / f"{name}.parquet", sep=";", backend=backend)
        predict(classifier, store, tmp_path / f"{name}-store.parquet", backend=backend)
    for suffix in ("", "-store"):
        here, there = (pd.read_parquet(tmp_path / f"{name}{suffix}.parquet") for name in ("here", "cluster"))
        assert here.equals(there)
    assert len(pd.read_parquet(tmp_path / "here-store.parquet")) == 240


def test_a_store_input_is_its_rows_of_model_features(classifier, tmp_path):
    store = open_store(classifier.parent / "s.zarr")
    predict(classifier, store.path, tmp_path / "test.csv", split="test")
    out = pd.read_csv(tmp_path / "test.csv")
    assert list(out.columns) == ["label", "proba_no", "proba_yes"] and len(out) == store.n_rows("test")
    predictor = load_predictor(classifier)
    X = store.arrays("test")[0][:].astype(np.float64)
    np.testing.assert_array_equal(out[["proba_no", "proba_yes"]].to_numpy(), predictor(X)["proba"])


@pytest.mark.heavy
def test_unseen_text_values_get_zero_one_hot_columns_and_are_counted(classifier, tmp_path):
    table = pd.read_csv(classifier.parent / "new.csv", sep=";")
    table.loc[[2, 5], "city"] = ["Rome", "Oslo"]
    table.to_csv(tmp_path / "new.csv", sep=";", index=False)
    summary = predict(classifier, tmp_path / "new.csv", tmp_path / "p.csv", sep=";")
    assert summary.unseen == {"city": {"Rome": 1, "Oslo": 1}}
    table["city"] = table["city"].where(~table["city"].isin(["Rome", "Oslo"]), "nowhere")
    out = pd.read_csv(tmp_path / "p.csv")
    np.testing.assert_allclose(out["proba_yes"], np.exp(oracle(classifier, table)["log_proba"][:, 1]), rtol=1e-12)


def test_na_drop_leaves_out_and_na_fail_refuses_rows_with_a_missing_value(classifier, tmp_path):
    """Issue 37, item 8: ``pep predict --na`` decides what a missing value does, whatever the ingest's
    policy was (this run's data were ingested with ``--na mean``, so mean is the default)."""
    table = pd.read_csv(classifier.parent / "new.csv", sep=";")
    table.loc[[3, 8], "age"] = np.nan
    table.loc[11, "city"] = np.nan
    table.to_csv(tmp_path / "new.csv", sep=";", index=False)
    filled = predict(classifier, tmp_path / "new.csv", tmp_path / "mean.csv", sep=";")
    assert filled.rows == 50 and filled.dropped == 0
    summary = predict(classifier, tmp_path / "new.csv", tmp_path / "drop.csv", sep=";", na="drop")
    kept = ~table.index.isin([3, 8, 11])
    assert summary.rows == 47 and summary.dropped == 3
    out, everything = pd.read_csv(tmp_path / "drop.csv"), pd.read_csv(tmp_path / "mean.csv")
    assert out["id"].tolist() == table["id"][kept].tolist()
    np.testing.assert_array_equal(out["proba_yes"], everything["proba_yes"][kept])
    with pytest.raises(InputError, match=r"new.csv: line 5, column 'age': missing value \(--na fail"):
        predict(classifier, tmp_path / "new.csv", tmp_path / "fail.csv", sep=";", na="fail")
    assert not (tmp_path / "fail.csv").exists()


def test_a_bad_value_after_the_first_chunk_leaves_no_output(classifier, tmp_path):
    table = pd.read_csv(classifier.parent / "new.csv", sep=";")
    table = pd.concat([table] * (BLOCK_ROWS // len(table) + 2), ignore_index=True)
    table["income"] = table["income"].astype(object)
    table.loc[len(table) - 3, "income"] = "n/a?"
    table.to_csv(tmp_path / "big.csv", sep=";", index=False)
    with pytest.raises(InputError, match=rf"big.csv: line {len(table) - 1}, column 'income': expected a number, "
                                         r"found 'n/a\?'"):
        predict(classifier, tmp_path / "big.csv", tmp_path / "p.parquet", sep=";")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.csv"]


@pytest.mark.parametrize(("options", "message"), [
    ({"input": "missing.csv"}, r"missing.csv: no such file"),
    ({"input": "new.txt"}, r"--input .*new.txt: expected a .csv \(or compressed .csv.gz, …\), .parquet or a pep store"),
    ({"out": "p.json"}, r"--out .*p.json: expected a name ending in .csv, .parquet or .zarr"),
    ({"out": "exists.csv"}, r"exists.csv: already exists; pass --overwrite to replace it"),
    ({"intervals": (0.9,)}, r"--interval: only for a regression run"),
    ({"split": "test"}, r"--split: .*new.csv is a table, not a store"),
    ({"sep": ","}, r"new.csv: read as a single column 'id;age;city;income' with --sep ','; .*pass --sep ';'"),
    ({"input": "no-city.csv"}, r"no-city.csv: no column 'city' \(a feature of the run\); columns are id, age, "
                               r"income$"),
])
def test_bad_predict_inputs_are_refused_before_anything_is_written(classifier, tmp_path, options, message):
    (tmp_path / "new.txt").write_text("x")
    (tmp_path / "exists.csv").write_text("keep me")
    pd.read_csv(classifier.parent / "new.csv", sep=";").drop(columns="city").to_csv(tmp_path / "no-city.csv",
                                                                                   sep=";", index=False)
    arguments = {"input": classifier.parent / "new.csv", "out": "p.csv", "sep": ";", **options}
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(InputError, match=message):
        predict(classifier, tmp_path / arguments.pop("input"), tmp_path / arguments.pop("out"), **arguments)
    assert sorted(p.name for p in tmp_path.iterdir()) == before and (tmp_path / "exists.csv").read_text() == "keep me"


@pytest.mark.heavy
def test_a_collapsed_regression_run_is_refused(tmp_path, monkeypatch):
    monkeypatch.setitem(MODELS, COLLAPSED.name, COLLAPSED)
    datafiles.write_messy_csv(tmp_path / "t.csv", n_rows=60, task="regression")
    ingest(open_source("csv", SourceRequest((tmp_path / "t.csv",), "spend", sep=";", ids=("id",), na="mean")),
           tmp_path / "s.zarr")
    train(TrainJob(COLLAPSED, open_store(tmp_path / "s.zarr"), SMALL, tmp_path / "run"))
    with pytest.raises(InputError, match=r"run: --model collapsed-regressor has no predictive distribution of new "
                                         r"rows \(it predicts from its training rows\)"):
        predict(tmp_path / "run", tmp_path / "t.csv", tmp_path / "p.csv", sep=";")


def test_a_run_loads_as_an_estimator_of_the_tables_own_columns(classifier, tmp_path):
    """``pep_gp.load(run)`` predicts a table with text columns as ``pep predict`` does (issue 24)."""
    from pep_gp import load

    new = classifier.parent / "new.csv"
    predict(classifier, new, tmp_path / "p.csv", sep=";")
    out, table = pd.read_csv(tmp_path / "p.csv"), pd.read_csv(new, sep=";")
    estimator = load(classifier)
    assert estimator.classes_.tolist() == ["no", "yes"]
    np.testing.assert_allclose(estimator.predict_proba(table), out[["proba_no", "proba_yes"]].to_numpy(),
                               rtol=1e-12, atol=1e-15)
    assert estimator.predict(table).tolist() == out["label"].tolist()
    store = open_store(classifier.parent / "s.zarr")  # the same float rows for both: the same bits
    predict(classifier, store.path, tmp_path / "store.parquet", split="test")
    rows = store.arrays("test")[0][:].astype(np.float64)
    loaded = load(classifier)
    del loaded.transforms_  # model features as the store holds them
    np.testing.assert_array_equal(loaded.predict_proba(rows),
                                  pd.read_parquet(tmp_path / "store.parquet")[["proba_no", "proba_yes"]].to_numpy())


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_an_estimator_saved_predicts_through_pep_predict_bit_identically(tmp_path):
    """``estimator.save`` → ``pep predict`` gives the estimator's own probabilities, in its labels."""
    from pep_gp import SparseGPClassifier

    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.normal(size=(80, 2)), columns=["a", "b"])
    y = np.where(X["a"] + 0.3 * rng.normal(size=80) > 0, "up", "down")
    estimator = SparseGPClassifier(num_inducing=8, max_iter=30).fit(X, y)
    estimator.save(tmp_path / "run")
    X.to_parquet(tmp_path / "new.parquet")  # exact floats (a CSV's text may parse 1 ulp away)
    predict(tmp_path / "run", tmp_path / "new.parquet", tmp_path / "p.parquet")
    out = pd.read_parquet(tmp_path / "p.parquet")
    np.testing.assert_array_equal(out[["proba_down", "proba_up"]].to_numpy(), estimator.predict_proba(X))
    assert out["label"].tolist() == estimator.predict(X).tolist()


def test_a_store_of_the_same_features_in_another_order_predicts_as_the_training_store(classifier, tmp_path):
    """Issue 37, item 3: a store's features are matched to the run's by name (here: reordered, not refused)."""
    table = pd.read_csv(classifier.parent / "train.csv", sep=";")
    table[["id", "bought", "income", "city", "age"]].to_csv(tmp_path / "reordered.csv", sep=";", index=False)
    ingest(open_source("csv", SourceRequest((tmp_path / "reordered.csv",), "bought", sep=";", ids=("id",),
                                            na="mean")), tmp_path / "reordered.zarr")
    for store in (classifier.parent / "s.zarr", tmp_path / "reordered.zarr"):
        predict(classifier, store, tmp_path / f"{store.stem}.parquet", split="test")
    np.testing.assert_array_equal(pd.read_parquet(tmp_path / "s.parquet").to_numpy(),
                                  pd.read_parquet(tmp_path / "reordered.parquet").to_numpy())


def test_id_columns_keep_their_type_from_a_parquet_input_to_every_output(classifier, tmp_path):
    """Issue 62, item 9b: integer ids came back as text in Parquet predictions (a Parquet input's ids were cast
    to text). Integers stay integers (a null too: not a float ``3.0``), text stays text (``007``), in every
    output; a CSV's ids are written as read."""
    table = pd.read_csv(classifier.parent / "new.csv", sep=";")
    ids = {"nullable": pa.array([None if i == 2 else 1000 + i for i in range(len(table))], pa.int64()),
           "int": pa.array(range(len(table)), pa.int64()),
           "text": pa.array([f"{i:03d}" for i in range(len(table))], pa.string())}
    for kind, values in ids.items():
        pq.write_table(pa.Table.from_pandas(table.drop(columns="id"), preserve_index=False).append_column("id", values),
                       tmp_path / f"{kind}.parquet")
    predict(classifier, tmp_path / "nullable.parquet", tmp_path / "predicted.parquet")
    assert pq.read_table(tmp_path / "predicted.parquet").column("id").combine_chunks() == ids["nullable"]
    transforms = load_predictor(classifier).transforms
    for kind, values in ids.items():  # the ids as pep predict writes them first in each output
        for suffix in (".parquet", ".csv", ".zarr"):
            with open_output(tmp_path / f"{kind}-ids{suffix}", overwrite=False) as writer:
                for chunk in open_input(tmp_path / f"{kind}.parquet", transforms).chunks():
                    writer.write(chunk_ids(chunk, transforms.id_columns))
        assert pq.read_table(tmp_path / f"{kind}-ids.parquet").column("id").combine_chunks() == values
        as_text = ["" if v is None else str(v) for v in values.to_pylist()]
        with open(tmp_path / f"{kind}-ids.csv", newline="") as written:
            assert [row[0] for row in csv.reader(written)] == ["id", *as_text]
        stored = zarr.open_group(str(tmp_path / f"{kind}-ids.zarr"), mode="r")["id"][:].tolist()
        assert stored == (as_text if kind == "nullable" else values.to_pylist())
    predict(classifier, classifier.parent / "new.csv", tmp_path / "csv.parquet", sep=";")
    assert pd.read_parquet(tmp_path / "csv.parquet")["id"].tolist() == table["id"].tolist()


@pytest.mark.parametrize("name", ["p.csv", "p.zarr"])
def test_an_output_another_run_published_meanwhile_is_kept_and_this_run_fails(classifier, tmp_path, name):
    """Issue 37, item 4: two runs to one --out without --overwrite: the second to finish fails, the first's
    output is kept, and no temporary is left."""
    out = tmp_path / name
    other = out / "zarr.json" if name.endswith(".zarr") else out  # the other run's output

    def the_other_run_publishes(rows):
        other.parent.mkdir(exist_ok=True)
        other.write_text("the other run's")

    with pytest.raises(InputError, match=rf"--out .*{name}: already exists \(another run wrote it while this one "
                                         r"predicted\); pass --overwrite to replace it"):
        predict(classifier, classifier.parent / "new.csv", out, sep=";", progress=the_other_run_publishes)
    assert other.read_text() == "the other run's"
    assert datafiles.listing(tmp_path) == {str(path.relative_to(tmp_path)) for path in (out, other)}


def test_a_full_disk_leaves_no_temporary_file(classifier, tmp_path, monkeypatch):
    """Issue 37, item 4: a disk that fills up as the last rows are flushed (NFS and quotas report it at
    close) fails every close of the CSV writer, the one that finishes the file and the one that releases it
    after the error: the first error is reported and the temporary file removed."""
    from pep_gp.pipeline.data import predictions

    def full(writer):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(predictions._CsvWriter, "close", full)
    monkeypatch.setattr(predictions._CsvWriter, "abort", full)
    with pytest.raises(OSError, match="No space left on device"):
        predict(classifier, classifier.parent / "new.csv", tmp_path / "p.csv", sep=";")
    assert datafiles.listing(tmp_path) == set()


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_sigterm_mid_predict_removes_the_temporary_output(classifier, tmp_path):
    """Issue 37, item 4: SIGTERM after the first rows are written (the process signals itself): exit status
    143 and nothing left in the output's directory."""
    code = ("import os, signal, sys\nfrom pep_gp.pipeline.runs.predict import predict\n"
            "predict(sys.argv[1], sys.argv[2], sys.argv[3], sep=';',\n"
            "        progress=lambda rows: os.kill(os.getpid(), signal.SIGTERM))\n")
    (tmp_path / "out").mkdir()
    done = subprocess.run([sys.executable, "-c", code, str(classifier), str(classifier.parent / "new.csv"),
                           str(tmp_path / "out" / "p.csv")], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 143, done.stderr
    assert datafiles.listing(tmp_path / "out") == set()
