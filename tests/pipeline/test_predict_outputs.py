"""``pep predict --latent/--quantiles/--samples`` (issue 39, item 1): the columns are the loaded run's
``predict_f`` and ``predict_quantiles``, the draws are inverse-CDF draws from each row's predictive, seeded
by row, and a 2-worker cluster writes the same bits as this process."""

from __future__ import annotations

import warnings
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pandas as pd
import pytest
from sklearn.exceptions import ConvergenceWarning
from typer.testing import CliRunner

import pep_gp
from pep_gp import DeepGPRegressor, SparseGPRegressor
from pep_gp.core import float64
from pep_gp.flows.cli import app
from pep_gp.pipeline.runs.predict import predict, row_uniforms

LEVELS = (0.05, 0.5, 0.95)


def run(*args):
    """``pep ARGS`` in this process."""
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Tiny regressors saved as runs (a sparse GP and a two-layer deep GP, a few steps each) and a CSV of
    new rows."""
    directory = tmp_path_factory.mktemp("regressors")
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 3, (60, 2))
    y = np.sin(x[:, 0]) + 0.1 * rng.normal(size=60)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        SparseGPRegressor(num_inducing=5, max_iter=5).fit(x, y).save(directory / "sparse")
        DeepGPRegressor(hidden_dims=(1,), num_inducing=5, max_iter=3).fit(x, y).save(directory / "deep")
    pd.DataFrame(rng.uniform(-3, 3, (9, 2)), columns=["x0", "x1"]).to_csv(directory / "new.csv", index=False)
    return {"sparse": directory / "sparse", "deep": directory / "deep", "new": directory / "new.csv"}


@pytest.mark.exhaustive
@pytest.mark.heavy
@pytest.mark.parametrize("model", ["sparse", "deep"])
def test_latent_and_quantile_columns_are_the_loaded_runs_predict_f_and_predict_quantiles(runs, model, tmp_path):
    out = tmp_path / "p.csv"
    done = run("predict", "--run-dir", runs[model], "--input", runs["new"], "--out", out, "--latent",
               "--quantiles", ",".join(map(str, LEVELS)), "--quiet")
    assert done.exit_code == 0, done.output
    table = pd.read_csv(out)
    assert list(table.columns) == ["mean", "std", "f_mean", "f_var", "q_0.05", "q_0.5", "q_0.95"]
    estimator, x = pep_gp.load(runs[model]), pd.read_csv(runs["new"]).to_numpy()
    mean, var = estimator.predict_f(x)
    np.testing.assert_allclose(table["f_mean"], mean, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(table["f_var"], var, rtol=1e-12)
    quantiles = estimator.predict_quantiles(x, LEVELS)
    np.testing.assert_allclose(table[["q_0.05", "q_0.5", "q_0.95"]], quantiles, rtol=1e-12, atol=1e-12)
    gaussian = table["mean"].to_numpy()[:, None] + table["std"].to_numpy()[:, None] * np.array(
        [NormalDist().inv_cdf(p) for p in LEVELS])
    if model == "sparse":  # Gaussian: the mean ± z·std intervals; the noise is in y's, not f's, variance
        np.testing.assert_allclose(quantiles, gaussian, rtol=1e-12, atol=1e-12)
        assert np.all(table["f_var"] < table["std"] ** 2)
    else:  # the mixture's quantiles are not the moment-matched Gaussian's
        assert np.max(np.abs(quantiles - gaussian)) > 1e-4


def test_samples_are_inverse_cdf_draws_seeded_by_row(runs, tmp_path):
    """A value drawn for row r is the predictive's quantile at the uniform of (seed, r); the same seed gives
    the same draws, another seed others; a Parquet input numbers its rows from 0 as a CSV numbers lines."""
    for seed in (3, 3, 4):
        done = run("predict", "--run-dir", runs["sparse"], "--input", runs["new"], "--out", tmp_path / f"{seed}.csv",
                   "--samples", 5, "--seed", seed, "--overwrite", "--quiet")
        assert done.exit_code == 0, done.output
    table, other = pd.read_csv(tmp_path / "3.csv"), pd.read_csv(tmp_path / "4.csv")
    draws = table[[f"sample_{i}" for i in range(5)]].to_numpy()
    assert list(table.columns) == ["mean", "std", *(f"sample_{i}" for i in range(5))]
    assert not np.allclose(draws, other[[f"sample_{i}" for i in range(5)]].to_numpy())
    with float64():
        lines = np.arange(2, 2 + len(table))  # the CSV's lines: the header is line 1
        uniforms = np.asarray(row_uniforms(3, lines.astype(np.uint32), 5))
    z = np.vectorize(NormalDist().inv_cdf)(uniforms)
    np.testing.assert_allclose(draws, table["mean"].to_numpy()[:, None] + table["std"].to_numpy()[:, None] * z,
                               rtol=1e-10, atol=1e-10)


@pytest.mark.heavy
def test_label_draws_follow_the_probabilities(messy_classifier, tmp_path):
    """400 label draws per row of the messy classifier: labels of the run, each row's frequency of 'yes'
    within 5 binomial standard errors of its probability; --latent adds the probit's f (p = Φ(f/√(1+v)))."""
    out = tmp_path / "p.parquet"
    predict(messy_classifier.run_dir, messy_classifier.new_csv, out, sep=";", latent=True, samples=400, seed=0)
    table = pd.read_parquet(out)
    assert list(table.columns[:6]) == ["id", "label", "proba_no", "proba_yes", "f_mean", "f_var"]
    draws = table[[f"sample_{i}" for i in range(400)]].to_numpy()
    assert set(np.unique(draws)) == {"yes", "no"}
    p = table["proba_yes"].to_numpy()
    assert np.all(np.abs((draws == "yes").mean(axis=1) - p) <= 5 * np.sqrt(p * (1 - p) / 400) + 1e-9)
    f = table["f_mean"] / np.sqrt(1 + table["f_var"])
    np.testing.assert_allclose(p, np.vectorize(NormalDist().cdf)(f), rtol=1e-10)


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_a_cluster_of_two_workers_writes_the_same_outputs(runs, messy_classifier, cluster, tmp_path):
    jobs = [(runs["deep"], runs["new"], None, dict(latent=True, quantiles=LEVELS, samples=3, seed=1)),
            (messy_classifier.run_dir, messy_classifier.store, None, dict(samples=2, seed=5))]
    for i, (run_dir, new, sep, options) in enumerate(jobs):
        here, there = tmp_path / f"here{i}.parquet", tmp_path / f"there{i}.parquet"
        predict(run_dir, new, here, sep=sep, **options)
        predict(run_dir, new, there, sep=sep, backend=cluster, **options)
        assert pd.read_parquet(here).equals(pd.read_parquet(there))


@pytest.mark.parametrize("args, message", [
    (["--quantiles", "0.5,x"], "--quantiles: expected comma-separated levels"),
    (["--quantiles", "0.5,1"], "--quantiles: expected levels in (0, 1)"),
    (["--samples", "-1"], "--samples: expected a number of draws ≥ 0"),
])
def test_bad_output_options_fail_with_one_line(runs, tmp_path, args, message):
    done = run("predict", "--run-dir", runs["sparse"], "--input", runs["new"], "--out", tmp_path / "p.csv", *args)
    assert done.exit_code == 2 and message in done.output and not (tmp_path / "p.csv").exists()


def test_quantiles_of_a_classifier_are_refused(messy_classifier, tmp_path):
    done = run("predict", "--run-dir", messy_classifier.run_dir, "--input", messy_classifier.new_csv, "--sep", ";",
               "--out", tmp_path / "p.csv", "--quantiles", "0.5")
    assert done.exit_code == 2 and "--quantiles: only for a regression run" in done.output
    assert not hasattr(pep_gp.load(messy_classifier.run_dir), "predict_quantiles")


def test_an_estimators_bad_quantile_levels_are_refused(runs):
    with pytest.raises(ValueError, match=r"quantiles: expected levels in \(0, 1\)"):
        pep_gp.load(runs["sparse"]).predict_quantiles(np.zeros((2, 2)), (0.5, 1.5))
