"""Stores of several regression targets (``pep ingest --target a --target b``): ``y`` ``(rows, P)`` with one
mean, deviation and name per target, grown by appends, refused when the array and the attributes disagree,
refused by the models of one target, fitted by ``MultiOutputGPRegressor`` as the rows they hold, and by ``pep train
--model multi-output-regressor`` into a run that predicts alone."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest
import zarr
from typer.testing import CliRunner

from pep_gp import MultiOutputGPRegressor, SparseGPRegressor, load
from pep_gp.flows.cli import app
from pep_gp.pipeline.data.stores import open_store
from pep_gp.pipeline.models import get_model
from pep_gp.pipeline.errors import InputError
from tests.tiny import FEATURES, INDUCING, ROWS


@pytest.fixture
def table(tmp_path):
    """A CSV of ``ROWS`` rows: ``FEATURES`` inputs and two targets, ``t1`` and ``t2``, every value a multiple of
    1/256 (float32 holds them exactly: the store keeps the table's values, with no offsets)."""
    rng = np.random.default_rng(0)
    x = np.round(rng.uniform(-2, 2, size=(ROWS, FEATURES)) * 256) / 256
    frame = pd.DataFrame(x, columns=[f"x{j}" for j in range(FEATURES)])
    frame["t1"] = np.round((np.sin(x[:, 0]) + 0.1 * rng.normal(size=ROWS)) * 256) / 256
    frame["t2"] = np.round((5.0 + 3.0 * np.cos(x[:, 1]) + 0.1 * rng.normal(size=ROWS)) * 256) / 256
    path = tmp_path / "two.csv"
    frame.to_csv(path, index=False)
    return path, frame


def sorted_rows(rows):
    """The rows in lexicographic order (stores keep them shuffled)."""
    return rows[np.lexsort(rows.T[::-1])]


def ingested(tmp_path, path, targets, *options):
    """``pep ingest csv --input PATH --target T1 --target T2 …`` (or ``--append`` among ``options``)."""
    args = ["ingest", "csv", "--input", str(path), *(a for t in targets for a in ("--target", t)), "--quiet", *options]
    if "--append" not in options:
        args += ["--out", str(tmp_path / "two.zarr"), "--chunk-rows", "16"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return open_store(tmp_path / "two.zarr")


def test_two_targets_are_stored_as_columns_with_their_own_statistics(tmp_path, table):
    """Every row of the table is stored once, its targets in ``y``'s columns in ``--target`` order, and each
    target's mean and deviation are numpy's of its stored training values (float32, as stored)."""
    path, frame = table
    store = ingested(tmp_path, path, ["t2", "t1"])
    x_train, y_train = store.chunks.rows("train", 0, store.n_rows("train"))
    x_test, y_test = store.chunks.rows("test", 0, store.n_rows("test"))
    assert store.target_names == ("t2", "t1") and y_train.shape == (store.n_rows("train"), 2)
    stored = np.column_stack([np.concatenate([x_train, x_test]), np.concatenate([y_train, y_test])])
    expected = frame[[*(f"x{j}" for j in range(FEATURES)), "t2", "t1"]].to_numpy(np.float32)
    np.testing.assert_array_equal(sorted_rows(stored), sorted_rows(expected))
    np.testing.assert_allclose(store.attrs["y_mean"], y_train.astype(np.float64).mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(store.attrs["y_std"], y_train.astype(np.float64).std(axis=0), rtol=1e-12)


def test_under_na_mean_a_row_missing_any_target_is_dropped_and_one_missing_a_feature_is_filled(tmp_path, table):
    path, frame = table
    frame = frame.astype(object)
    frame.loc[3, "t1"], frame.loc[5, "x1"] = None, None  # t1: not the last column
    frame.to_csv(path, index=False)
    store = ingested(tmp_path, path, ["t1", "t2"], "--na", "mean")
    assert store.n_rows("train") + store.n_rows("test") == len(frame) - 1
    assert store.attrs["rows_dropped"] == {"missing value in column 't1'": 1}


def test_an_append_grows_both_targets_and_their_statistics(tmp_path, table):
    """Rows appended to a store of two targets take both columns, and each target's statistics are again
    numpy's of every stored training value."""
    path, frame = table
    store = ingested(tmp_path, path, ["t1", "t2"])
    more = tmp_path / "more.csv"
    frame.iloc[:20].assign(t1=frame.t1.iloc[:20] + 1.0).to_csv(more, index=False)
    grown = ingested(tmp_path, more, ["t1", "t2"], "--append", str(store.path))
    grown.verify()
    _, y = grown.chunks.rows("train", 0, grown.n_rows("train"))
    assert grown.n_rows("train") + grown.n_rows("test") == len(frame) + 20 and y.shape == (grown.n_rows("train"), 2)
    np.testing.assert_allclose(grown.attrs["y_mean"], y.astype(np.float64).mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(grown.attrs["y_std"], y.astype(np.float64).std(axis=0), rtol=1e-12)


def test_an_npz_y_of_several_columns_is_several_targets_and_classification_of_them_is_refused(tmp_path):
    """``y`` ``(N, 3)`` in an ``.npz``: targets ``y0``, ``y1``, ``y2``, every row stored once; with ``--task
    classification`` refused in one line before a row is read."""
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(30, 2)).astype(np.float32), rng.normal(size=(30, 3)).astype(np.float32)
    np.savez(tmp_path / "m.npz", X=x, y=y)
    args = ["ingest", "npz", "--input", str(tmp_path / "m.npz"), "--out", str(tmp_path / "m.zarr"), "--quiet"]
    assert CliRunner().invoke(app, args).exit_code == 0
    store = open_store(tmp_path / "m.zarr")
    stored = np.column_stack([np.concatenate(parts) for parts in zip(*(store.chunks.rows(split, 0, store.n_rows(split))
                                                                       for split in ("train", "test")))])
    assert store.target_names == ("y0", "y1", "y2")
    np.testing.assert_array_equal(sorted_rows(stored), sorted_rows(np.column_stack([x, y])))
    refused = CliRunner().invoke(app, [*args, "--overwrite", "--task", "classification"])
    assert refused.exit_code == 2 and refused.output.strip().splitlines() == [
        "pep ingest: error: --task classification: the 3 target columns ('y0', 'y1', 'y2') are regression targets; "
        "a classification takes one"]


@pytest.mark.parametrize("change, message", [
    ({"target_name": ["t1", "t2", "t3"], "y_mean": [0.0] * 3, "y_std": [1.0] * 3},
     r"two\.zarr: array 'train/y': expected shape \(\d+, 3\), dtype float32, chunks \(16, 3\); found shape "
     r"\(\d+, 2\), dtype float32, chunks \(16, 2\)$"),
    ({"target_name": "t1", "y_mean": 0.0, "y_std": 1.0},
     r"two\.zarr: array 'train/y': expected shape \(\d+,\), dtype float32, chunks \(16,\); found shape \(\d+, 2\)"),
    ({"y_std": [1.0]}, r"two\.zarr: attribute 'y_std': expected 2 values \(one per target\) as 'target_name' names, "
                       r"found \[1\.0\]$"),
    ({"target_name": ["t1", "t1"]}, r"two\.zarr: attribute 'target_name': expected one name, or a list of at least "
                                    r"2 distinct regression targets, found \['t1', 't1'\] for regression$"),
])
def test_a_store_whose_targets_disagree_with_its_attributes_is_refused_in_one_line(tmp_path, table, change, message):
    store = ingested(tmp_path, table[0], ["t1", "t2"])
    zarr.open_group(store.path, mode="r+").attrs.update(change)
    with pytest.raises(InputError, match=message) as error:
        open_store(store.path)
    assert "\n" not in str(error.value)


def test_a_model_of_one_target_refuses_a_store_of_two(tmp_path, table):
    """In one line, from the estimator and from the spec ``pep train`` and ``pep evaluate`` check a store with."""
    store = ingested(tmp_path, table[0], ["t1", "t2"])
    with pytest.raises(InputError, match=r"^SparseGPRegressor: .*two\.zarr holds 2 targets per row \('t1', 't2'\); "
                                         r"SparseGPRegressor fits one \(MultiOutputGPRegressor fits several\)$"):
        SparseGPRegressor().fit(store.path)
    spec = get_model("sparse-gp-regressor")
    with pytest.raises(InputError, match=r"two\.zarr: holds 2 targets per row \('t1', 't2'\); --model "
                                         r"sparse-gp-regressor fits one \(MultiOutputGPRegressor fits several\)$"):
        spec.check(store, spec.Settings(), 256)


@pytest.mark.heavy  # two fits of one compilation: 28 s wall, ~10 s CPU at a load of 8 on two cores
def test_multi_output_fit_of_a_store_is_the_fit_of_its_training_rows(tmp_path, table):
    """The estimator is the oracle: fitted on the store, it predicts (mean and deviation) as when fitted on the
    store's training rows as arrays, and names its outputs after the store's targets. To rounding, not to the
    bit: the store's standardisation is pep ingest's, its moments merged in the order the rows streamed in,
    the arrays' merged in their stored order (measured 1e-14 apart after two iterations)."""
    store = ingested(tmp_path, table[0], ["t1", "t2"])
    x, y = store.chunks.rows("train", 0, store.n_rows("train"))
    x_new = store.chunks.rows("test", 0, store.n_rows("test"))[0]
    settings = {"num_inducing": INDUCING, "max_iter": 2}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # two iterations: not converged, and the store's feature names
        from_store = MultiOutputGPRegressor(**settings).fit(store.path)
        from_rows = MultiOutputGPRegressor(**settings).fit(x, y)
        mean, std = from_store.predict(x_new, return_std=True)
        expected_mean, expected_std = from_rows.predict(x_new, return_std=True)
    np.testing.assert_allclose(mean, expected_mean, rtol=1e-12)
    np.testing.assert_allclose(std, expected_std, rtol=1e-12)
    assert mean.shape == (len(x_new), 2) and list(from_store.target_names_) == ["t1", "t2"]


@pytest.mark.heavy  # pep train, predict, evaluate, an estimator fit: 203 s wall, 20 s CPU (~10 of it imports) at load 29
def test_pep_train_and_predict_of_two_targets_are_the_estimators_fit_and_load_predicts_the_same(tmp_path, table):
    """The estimator is the oracle: ``pep train`` (settings from TOML and ``--set``) then ``pep predict`` give, to
    the bit, the predictions of ``MultiOutputGPRegressor`` fitted on the store by the same Adam steps; the run
    loads with ``pep_gp.load`` and predicts the same, each output's training mean far from the data (its prior
    mean, ``mean_function_``, to rounding); ``pep evaluate --input`` of the table scores every row's targets;
    ``--interval`` is refused in one line (exit 2), and so is ``pep evaluate --target`` of one of the targets."""
    path, frame = table
    store = ingested(tmp_path, path, ["t1", "t2"])
    (tmp_path / "c.toml").write_text(f"max_steps = 5\n[model]\nnum_inducing = {INDUCING}\n")
    runner, run = CliRunner(), tmp_path / "run"
    trained = runner.invoke(app, ["train", "--model", "multi-output-regressor", "--data", str(store.path), "--run-dir",
                                  str(run), "--config", str(tmp_path / "c.toml"), "--set", "model.outputs=lmc", "--quiet"])
    assert trained.exit_code == 0, trained.output
    predicted = runner.invoke(app, ["predict", "--run-dir", str(run), "--input", str(path), "--out",
                                    str(tmp_path / "p.csv"), "--quiet"])
    assert predicted.exit_code == 0, predicted.output
    out, x = pd.read_csv(tmp_path / "p.csv"), frame[[f"x{j}" for j in range(FEATURES)]].to_numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # five steps: not converged
        fitted = MultiOutputGPRegressor(num_inducing=INDUCING, outputs="lmc", max_iter=5, solver="adam").fit(store.path)
    mean, std = fitted.predict(x, return_std=True)
    np.testing.assert_array_equal(out[["mean_t1", "mean_t2"]].to_numpy(), mean)  # CSV's shortest repr: exact
    np.testing.assert_array_equal(out[["std_t1", "std_t2"]].to_numpy(), std)
    loaded = load(run)
    assert list(loaded.target_names_) == ["t1", "t2"] and loaded.model_settings_["outputs"] == "lmc"
    np.testing.assert_array_equal(loaded.predict(x, return_std=True), (mean, std))
    far, y_train = np.full((2, FEATURES), 1e3), store.chunks.rows("train", 0, store.n_rows("train"))[1]
    prior = np.broadcast_to(y_train.astype(np.float64).mean(axis=0), (2, 2))  # stored float32 values
    np.testing.assert_allclose(loaded.predict(far), prior, rtol=1e-12)
    np.testing.assert_allclose(loaded.mean_function_(far), loaded.predict(far), rtol=1e-12)
    scored = runner.invoke(app, ["evaluate", "--run-dir", str(run), "--input", str(path), "--json"])
    assert scored.exit_code == 0, scored.output  # RMSE over every row and target, as docs/how-to/multi-output.md says
    rmse = np.sqrt(np.mean((frame[["t1", "t2"]].to_numpy() - mean) ** 2))
    assert json.loads(scored.output)["rmse"] == pytest.approx(rmse, rel=1e-12)
    refused = runner.invoke(app, ["predict", "--run-dir", str(run), "--input", str(path), "--out",
                                  str(tmp_path / "q.csv"), "--interval", "0.9"])
    assert refused.exit_code == 2 and "--interval: not available for a multi-output run" in refused.output
    assert not (tmp_path / "q.csv").exists()
    one_target = runner.invoke(app, ["evaluate", "--run-dir", str(run), "--input", str(path), "--target", "t1"])
    assert one_target.exit_code != 0 and "scores each of its targets (t1, t2); leave --target out" in one_target.output


def test_a_runs_targets_hold_one_shift_and_scale_per_target():
    """A multi-output run's manifest records each target's shift and scale (lists), and its scaling maps
    ``y`` ``[N, P]`` column by column as numpy does, its log-Jacobian ``Σ_p log scale_p``; one number each
    keeps ``log scale`` to the bit. Lists of other lengths, or a non-positive scale, are refused."""
    import math

    from pydantic import ValidationError

    from pep_gp.pipeline.data.blocks import TargetScaling
    from pep_gp.pipeline.data.datasets import ArrayData
    from pep_gp.pipeline.runs.manifest import Targets

    y = np.random.default_rng(0).normal(size=(30, 2)) * [2.0, 5.0] + [1.0, -3.0]
    data = ArrayData(np.ones((30, 1)), y, "regression")
    targets = Targets(shift=data.attrs["y_mean"], scale=data.attrs["y_std"])
    scaling = TargetScaling(targets.shift, targets.scale)
    np.testing.assert_allclose(scaling(y), (y - y.mean(axis=0)) / y.std(axis=0), rtol=1e-12, atol=1e-14)
    assert scaling.log_scale() == pytest.approx(np.sum(np.log(y.std(axis=0))), rel=1e-14)
    assert hash(scaling) == hash(TargetScaling(tuple(targets.shift), tuple(targets.scale)))
    assert TargetScaling(0.5, 1.7).log_scale() == math.log(1.7)
    for shift, scale in (([1.0, 2.0], [1.0]), (1.0, [1.0]), ([1.0, 2.0], [1.0, 0.0]), ([], [])):
        with pytest.raises(ValidationError):
            Targets(shift=shift, scale=scale)
