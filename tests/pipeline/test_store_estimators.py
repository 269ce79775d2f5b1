"""Estimators fitted from a pep store (issue 65, item 7): ``fit(store)`` and ``partial_fit(store)`` take the same
steps as on the store's training rows in memory (bit for bit), the fitted estimator reads a table's raw rows as
``pep predict`` does, and every way of getting it wrong is refused by name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pep_gp import (CollapsedGPRegressor, ExactGPClassifier, MultiClassEPClassifier, SparseGPClassifier,
                    SparseGPRegressor)
from pep_gp.pipeline.data.ingest import ingest
from pep_gp.pipeline.data.sources import SourceRequest, open_source
from pep_gp.pipeline.data.stores import open_store
from pep_gp.pipeline.errors import InputError
from pep_gp.pipeline.runs.run import load_run
from tests import tiny
from tests.flows.test_predict_cli import run
from tests.trainstores import leaves_equal, make_store

# tiny.py's shapes (60 training rows: a fifth of 75 go to the test split; 3 features, 5 inducing points) and
# Adam's steps on one block of them, the compiled programs of the other tiny fits; one chunk per split, so
# that the store's statistics are those the estimator computes of the same rows. Minibatches of a store:
# the pep train test below.
SETTINGS = {"num_inducing": tiny.INDUCING, "max_iter": 5, "tol": 0, "solver": "adam", "seed": 3}


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    directory = tmp_path_factory.mktemp("stores")
    return {task: make_store(directory / f"{task}.zarr", task=task, n_rows=75, n_features=tiny.FEATURES,
                             chunk_rows=10_000) for task in ("classification", "regression")}


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """A table's store (a text column one-hot encoded, a number less its offset, labels ``no``/``yes``) and
    the table."""
    directory = tmp_path_factory.mktemp("table")
    rng = np.random.default_rng(1)
    city, income = rng.choice(["Lyon", "Paris"], 75), np.round(rng.normal(50, 10, 75), 2)
    bought = np.where((city == "Paris") + (income - 50) / 10 + rng.normal(0, 0.5, 75) > 0.5, "yes", "no")
    frame = pd.DataFrame({"city": city, "income": income, "bought": bought})
    frame.to_csv(directory / "t.csv", index=False)
    ingest(open_source("csv", SourceRequest((directory / "t.csv",), "bought")), directory / "t.zarr")
    return open_store(directory / "t.zarr"), frame


def training_arrays(store):
    x, y = (a[:] for a in store.arrays("train"))
    return x.astype(np.float64), y


@pytest.mark.heavy  # 10-15 s on two cores: compiling a fit's programs at the store's block size
def test_fit_from_a_store_takes_the_steps_of_fit_on_its_training_rows(stores):
    store = stores["classification"]
    fitted = SparseGPClassifier(**SETTINGS).fit(Path(store.path))
    in_memory = SparseGPClassifier(**SETTINGS).fit(*training_arrays(store))
    assert leaves_equal(fitted.params_, in_memory.params_) and fitted.n_iter_ == 5 and fitted.solver_ == "adam"
    assert fitted.classes_.tolist() == [0, 1] and fitted.n_features_in_ == tiny.FEATURES
    assert fitted.data_checksum_ == store.checksum and fitted.n_rows_seen_ == 60


@pytest.mark.heavy  # 10-15 s on two cores: compiling a fit's programs at the store's block size
def test_partial_fit_from_a_store_continues_as_on_its_training_rows(stores):
    store = stores["regression"]
    settings = {name: value for name, value in SETTINGS.items() if name not in ("max_iter", "tol")}
    streamed, in_memory = SparseGPRegressor(**settings), SparseGPRegressor(**settings)
    x, y = training_arrays(store)
    for _ in range(2):
        streamed.partial_fit(store.path)
        in_memory.partial_fit(x, y)
        assert leaves_equal(streamed.params_, in_memory.params_)
    assert streamed.n_iter_ == 2 and streamed.n_rows_seen_ == 120  # two epochs of one step over 60 rows
    assert streamed.targets_ == in_memory.targets_  # the store's y_mean and y_std


@pytest.mark.heavy  # 10-15 s on two cores: compiling a fit's programs at the store's block size
def test_a_fit_from_a_table_store_predicts_the_tables_raw_rows(table):
    """The oracle: the same fit on the store's rows in memory, predicting rows encoded by hand (one-hot city,
    income less its mean over every ingested row)."""
    store, frame = table
    fitted = SparseGPClassifier(**SETTINGS).fit(store)
    assert fitted.classes_.tolist() == ["no", "yes"] and store.feature_names == ("city=Lyon", "city=Paris", "income")
    x, labels = training_arrays(store)
    in_memory = SparseGPClassifier(**SETTINGS).fit(x, labels)
    assert leaves_equal(fitted.params_, in_memory.params_)
    encoded = np.column_stack([frame["city"] == "Lyon", frame["city"] == "Paris", frame["income"] - frame["income"].mean()])
    np.testing.assert_allclose(fitted.predict_proba(frame.drop(columns="bought")),
                               in_memory.predict_proba(encoded.astype(np.float64)), rtol=0, atol=1e-12)
    assert fitted.predict(frame.drop(columns="bought")).tolist() == np.asarray(["no", "yes"])[
        in_memory.predict(encoded.astype(np.float64))].tolist()
    with pytest.raises(ValueError, match="fitted on a table's store.*continue it on a store of that table"):
        fitted.partial_fit(x, labels)
    fitted.fit(x, labels)  # arrays again: their features as given, no table's reading left over
    assert not hasattr(fitted, "transforms_") and leaves_equal(fitted.params_, in_memory.params_)


def test_what_cannot_fit_from_a_store_is_refused_by_name(stores, table, tmp_path):
    classification, regression = stores["classification"], stores["regression"]
    with pytest.raises(ValueError, match=r"SparseGPClassifier: y must be None when X is a store .*holds its own targets"):
        SparseGPClassifier().fit(classification.path, np.zeros(60))
    with pytest.raises(InputError, match=r"SparseGPClassifier: .*nothing\.zarr: no such store"):
        SparseGPClassifier().fit(str(tmp_path / "nothing.zarr"))
    (tmp_path / "plain").mkdir()
    with pytest.raises(InputError, match=r"SparseGPRegressor: .*plain"):
        SparseGPRegressor().fit(tmp_path / "plain")
    with pytest.raises(InputError, match=r"SparseGPClassifier: .*regression\.zarr holds a regression task, but "
                                         r"SparseGPClassifier is a classifier"):
        SparseGPClassifier().fit(regression)
    with pytest.raises(InputError, match=r"SparseGPRegressor: .* holds a classification task.* is a regressor"):
        SparseGPRegressor().partial_fit(classification.path)
    with pytest.raises(ValueError, match="SparseGPClassifier: early_stopping holds out validation_fraction"):
        SparseGPClassifier(early_stopping=True).fit(classification.path)
    for estimator, alternative in ((CollapsedGPRegressor, "SparseGPRegressor"), (ExactGPClassifier, "SparseGPClassifier"),
                                   (MultiClassEPClassifier, "MultiClassGPClassifier")):
        with pytest.raises(ValueError, match=rf"{estimator.__name__} fits arrays X, y only, not a store .*"
                                             rf"{alternative} fits a store in minibatches"):
            estimator().fit(regression.path if estimator is CollapsedGPRegressor else classification.path)
    with pytest.raises(ValueError, match=r"classes=\['cat', 'dog'\] are not the classes of .*\[0, 1\]"):
        SparseGPClassifier().partial_fit(classification.path, classes=["cat", "dog"])


@pytest.mark.heavy
def test_a_store_of_other_features_or_classes_does_not_continue_a_fit(stores, table):
    fitted = SparseGPClassifier(**{**SETTINGS, "max_iter": 1, "warm_start": True}).fit(stores["classification"])
    with pytest.raises(ValueError, match=r"t\.zarr holds the features \['city=Lyon', 'city=Paris', 'income'\].*not "
                                         r"those the estimator was fitted on \(\['x0', 'x1', 'x2'\]"):
        fitted.fit(table[0])
    with pytest.raises(ValueError, match=r"t\.zarr holds the features .*not those"):
        fitted.partial_fit(table[0].path)


@pytest.mark.heavy
def test_fit_from_a_store_ends_as_pep_train_and_predicts_raw_rows_as_pep_predict(messy_classifier, tmp_path):
    """``pep ingest`` and ``pep train`` of a messy CSV (tests/messy_runs.py: 2 epochs of 100-row batches,
    8 inducing points), then ``pep predict`` of new raw rows; the estimator fitted from the same store with the
    same settings ends with the run's parameters, bit for bit, and predicts the new rows' DataFrame as
    ``pep predict`` does."""
    trained = load_run(messy_classifier.run_dir)
    fitted = SparseGPClassifier(num_inducing=8, batch_size=100, learning_rate=0.05, max_iter=trained.step, tol=0)
    fitted.fit(messy_classifier.store)
    assert leaves_equal(fitted.params_, trained.trees["params"])
    out = tmp_path / "p.csv"
    result = run("predict", "--run-dir", messy_classifier.run_dir, "--input", messy_classifier.new_csv, "--sep", ";",
                 "--out", out, "--quiet")
    assert result.exit_code == 0, result.output
    predicted, rows = pd.read_csv(out), pd.read_csv(messy_classifier.new_csv, sep=";")
    assert fitted.classes_.tolist() == ["no", "yes"]
    np.testing.assert_allclose(fitted.predict_proba(rows), predicted[["proba_no", "proba_yes"]].to_numpy(),
                               rtol=0, atol=1e-12)
    assert fitted.predict(rows).tolist() == predicted["label"].tolist()
