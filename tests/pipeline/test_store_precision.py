"""Stores keep what the table said (issue 37, item 2): a column float32 cannot hold exactly is stored less
its float64 mean (the offset recorded in the store's ``transforms``), dates and times are seconds since
1970-01-01 UTC, and every reader (``pep predict`` of a table or of another store, ``pep evaluate --data``,
a loaded run's ``predict`` of raw rows) applies the same offsets."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import zarr

from pep_gp import load
from pep_gp.pipeline.data.ingest import ingest
from pep_gp.pipeline.data.sources import SourceRequest, open_source
from pep_gp.pipeline.data.sources.tables import csv_chunks
from pep_gp.pipeline.data.stores import open_store
from pep_gp.pipeline.errors import InputError
from pep_gp.pipeline.runs.predict import predict
from pep_gp.pipeline.runs.config import TrainConfig
from pep_gp.pipeline.runs.run import evaluate
from pep_gp.pipeline.training.trainer import TrainJob, train

SHORT = TrainConfig(model={"num_inducing": 8}, max_steps=60, tol=0.0, batch_size=1000, learning_rate=0.05)
START = pd.Timestamp("2024-05-01", tz="UTC")


def table(n: int, seed: int, shift: float = 0.0) -> pd.DataFrame:
    """One signal in four forms: centred ``x``, ``1e12 + x``, Unix seconds ``1.7e9 + 3600 x`` and the same
    instants as ISO 8601 text; the label is the sign of ``x`` plus noise."""
    rng = np.random.default_rng(seed)
    x = rng.normal(shift, 1.0, n)
    when = START + pd.to_timedelta(3600 * x, unit="s")
    return pd.DataFrame({"x": x, "big": 1e12 + x, "unix": when.astype("int64") / 1e9,
                         "when": when.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                         "label": (x + 0.3 * rng.normal(size=n) > shift).astype(int)})


def ingest_column(tmp_path, frame: pd.DataFrame, column: str, name: str):
    path = tmp_path / f"{name}.csv"
    frame[[column, "label"]].to_csv(path, index=False)
    ingest(open_source("csv", SourceRequest((path,), "label")), tmp_path / f"{name}.zarr", test_size="0.25")
    return open_store(tmp_path / f"{name}.zarr")


FORMS = {"x": 1.0, "big": 1.0, "unix": 3600.0, "when": 3600.0}  # each form's unit, in units of x


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """A store of each form of :func:`table`'s 300 rows (the same split) and a short fit on each but the
    Unix seconds (stored as the ISO text is): one compilation, the shapes are the same."""
    tmp_path = tmp_path_factory.mktemp("forms")
    frame, out = table(300, seed=0), {}
    for column in FORMS:
        out[column] = (ingest_column(tmp_path, frame, column, column), tmp_path / f"run-{column}")
        if column != "unix":
            train(TrainJob("sparse-gp-classifier", out[column][0], SHORT, out[column][1]))
    return out


@pytest.mark.heavy
def test_a_far_from_zero_column_and_times_train_to_the_error_of_the_centred_column(runs):
    """Each form stores the centred signal (to float32) and its fit predicts raw rows of a new table
    (through ``pep_gp.load``) with the centred column's test error."""
    new = table(300, seed=1)
    stored = {column: store.arrays("train")[0][:, 0] / FORMS[column] for column, (store, _) in runs.items()}
    for column in ("big", "unix", "when"):
        np.testing.assert_allclose(stored[column] - stored[column].mean(), stored["x"] - stored["x"].mean(), atol=2e-4)
    assert runs["when"][0].attrs["transforms"]["features"][0]["kind"] == "time"
    errors = {column: float(np.mean(load(run).predict(new[[column]]) != new["label"]))
              for column, (_, run) in runs.items() if column != "unix"}
    assert errors["x"] < 0.15 and all(abs(error - errors["x"]) <= 0.01 for error in errors.values()), errors


@pytest.mark.heavy
def test_another_store_of_the_table_is_moved_to_the_runs_offsets(runs, tmp_path):
    """``pep predict`` of a store with its own offset gives the probabilities of the same rows as a CSV, and
    ``pep evaluate --data`` the metrics of those rows as raw numbers (a loaded run's array path)."""
    first, run = runs["big"]
    other = ingest_column(tmp_path, table(300, seed=1, shift=0.5), "big", "other")
    offsets = [s.transforms.features[0].offset for s in (first, other)]
    assert offsets[0] != offsets[1] and np.all(np.isfinite(offsets))
    predict(run, other.path, tmp_path / "store.csv", split="test")
    X_test, y_test = (a[:] for a in other.arrays("test"))
    raw = X_test.astype(np.float64) + offsets[1]
    pd.DataFrame({"big": raw[:, 0]}).to_csv(tmp_path / "rows.csv", index=False)
    predict(run, tmp_path / "rows.csv", tmp_path / "table.csv")
    from_store, from_table = (pd.read_csv(tmp_path / f"{n}.csv")[["proba_0", "proba_1"]] for n in ("store", "table"))
    np.testing.assert_allclose(from_store, from_table, atol=1e-9)
    proba = load(run).predict_proba(raw)
    metrics = evaluate(run, other.path)
    assert metrics["test_error"] == pytest.approx(np.mean(proba.argmax(axis=1) != y_test))
    assert metrics["test_nll"] == pytest.approx(-np.mean(np.log(proba[np.arange(len(y_test)), y_test])), rel=1e-6)


@pytest.mark.parametrize(("offset", "message"), [
    (float("nan"), "finite number"), ("1e12", "valid number"), (None, "valid number")])
def test_a_bad_stored_offset_is_refused_when_the_store_opens(tmp_path, offset, message):
    store = ingest_column(tmp_path, table(40, seed=0), "big", "s")
    record = dict(store.attrs["transforms"])
    record["features"] = [{**record["features"][0], "offset": offset}]
    zarr.open_group(str(store.path), mode="r+").attrs["transforms"] = record
    with pytest.raises(InputError, match=rf"attribute 'transforms'.*features\.0\.numeric\.offset: .*{message}"):
        open_store(store.path)


def test_a_store_written_before_offsets_reads_as_its_float32_values(tmp_path):
    """A record without ``offset`` (pep before issue 37) held the table's values as float32: offset 0."""
    store = ingest_column(tmp_path, pd.DataFrame({"n": np.arange(40) % 7, "label": np.arange(40) % 2}), "n", "s")
    record = dict(store.attrs["transforms"])
    assert record["features"][0]["offset"] == 0.0  # integers: float32 holds them, the store keeps them
    record["features"] = [{k: v for k, v in f.items() if k != "offset"} for f in record["features"]]
    zarr.open_group(str(store.path), mode="r+").attrs["transforms"] = record
    reopened = open_store(store.path)
    assert reopened.transforms.offsets.tolist() == [0.0] and reopened.transforms.is_identity


def test_a_time_column_names_its_unit_and_refuses_a_value_that_is_not_a_time(tmp_path):
    frame = table(40, seed=0)
    store = ingest_column(tmp_path, frame, "when", "s")
    feature = store.attrs["transforms"]["features"][0]
    assert (feature["kind"], feature["unit"]) == ("time", "s")
    assert feature["offset"] == pytest.approx(frame["unix"].mean(), abs=1e-3)
    parquet = frame.assign(when=pd.to_datetime(frame["when"]))[["when", "label"]]  # a timestamp column
    parquet.to_parquet(tmp_path / "t.parquet")
    ingest(open_source("parquet", SourceRequest((tmp_path / "t.parquet",), "label")), tmp_path / "p.zarr",
           test_size="0.25")
    assert open_store(tmp_path / "p.zarr").attrs["transforms"]["features"][0] == feature
    frame.loc[3, "when"] = "tomorrow"
    frame[["when"]].to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(InputError, match=r"bad.csv: line 5, column 'when': expected a date and time .*'tomorrow'"):
        store.transforms.apply(next(csv_chunks([tmp_path / "bad.csv"], ["when"], frozenset(), ",")))
