"""``fixed=`` for the likelihood's parameters (issue 65, item 3), spelled as a kernel's: a fixed parameter keeps
the bits it started from through a fit (L-BFGS and Adam), while the others move; an unknown name is refused in
one line; ``pep train`` takes it from ``[model]`` / ``--set`` and the saved run keeps it through ``pep_gp.load``
and ``pep predict``."""

from __future__ import annotations


import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import pep_gp
from pep_gp import CollapsedGPRegressor, SparseGPRegressor
from pep_gp.flows.cli import app
from pep_gp.pipeline.runs.config import TrainConfig, parse_settings
from pep_gp.pipeline.training.trainer import TrainJob, train
from tests.fits import fit


@pytest.fixture(scope="module")
def curve():
    rng = np.random.default_rng(4)
    x = rng.uniform(-3, 3, (60, 1))
    return x, np.sin(x[:, 0]) + 0.3 * rng.normal(size=60)


def bits(value) -> bytes:
    return np.asarray(value, np.float64).tobytes()


@pytest.mark.exhaustive
@pytest.mark.heavy
@pytest.mark.parametrize("solver", ["lbfgs", "adam"])
def test_a_fixed_gaussian_noise_keeps_its_bits_and_the_kernel_moves(curve, solver):
    x, y = curve
    model = fit(SparseGPRegressor(num_inducing=5, noise_variance=0.05, fixed=("noise_variance",), solver=solver,
                                  max_iter=20), x, y)
    start = model.model_.likelihood.init_params(0.05)["raw_noise_variance"]
    assert bits(model.params_.likelihood["raw_noise_variance"]) == bits(start)
    free = fit(SparseGPRegressor(num_inducing=5, noise_variance=0.05, solver=solver, max_iter=20), x, y)
    assert abs(float(free.params_.likelihood["raw_noise_variance"]) - float(start)) > 1e-3
    initial = fit(SparseGPRegressor(num_inducing=5, noise_variance=0.05, fixed="noise_variance", max_iter=0), x, y)
    assert abs(float(model.params_.kernel.variance.raw[0]) - float(initial.params_.kernel.variance.raw[0])) > 1e-3


@pytest.mark.heavy
@pytest.mark.parametrize("likelihood, name, kept, moved, start", [
    ("student-t", "dof", "raw_dof", "raw_scale", {"noise_variance": 0.09, "dof": 3.0}),
    ("student-t", "scale", "raw_scale", "raw_dof", {"noise_variance": 0.09, "dof": 3.0}),
])
def test_a_fixed_student_t_parameter_keeps_its_bits_and_the_other_moves(curve, likelihood, name, kept, moved, start):
    x, y = curve
    model = fit(SparseGPRegressor(num_inducing=5, likelihood=likelihood, fixed=[name], max_iter=15, **start), x, y)
    initial = model.model_.likelihood.init_params(start["noise_variance"] ** 0.5, start["dof"])
    assert bits(model.params_.likelihood[kept]) == bits(initial[kept])
    assert abs(float(model.params_.likelihood[moved]) - float(initial[moved])) > 1e-4


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_a_fixed_negative_binomial_dispersion_keeps_its_bits():
    rng = np.random.default_rng(1)
    x = rng.uniform(-2, 2, (50, 1))
    y = rng.negative_binomial(2.0, 2.0 / (2.0 + np.exp(1.0 + np.sin(x[:, 0]))))
    model = fit(SparseGPRegressor(num_inducing=4, likelihood="negative-binomial", dispersion=2.0,
                                  fixed="dispersion", max_iter=10), x, y)
    assert bits(model.params_.likelihood["raw_dispersion"]) == bits(
        model.model_.likelihood.init_params(2.0)["raw_dispersion"])


@pytest.mark.heavy
def test_the_collapsed_regressor_keeps_a_fixed_noise(curve):
    x, y = curve
    model = fit(CollapsedGPRegressor(num_inducing=5, noise_variance=0.05, fixed="noise_variance", max_iter=20), x, y)
    assert float(model.params_.noise_variance) == pytest.approx(0.05, rel=1e-15)
    free = fit(CollapsedGPRegressor(num_inducing=5, noise_variance=0.05, max_iter=20), x, y)
    assert abs(float(free.params_.noise_variance) - 0.05) > 1e-3


@pytest.mark.parametrize("kwargs, words", [
    ({"fixed": "lengthscales"}, ["lengthscales", "noise_variance", "kernel"]),
    ({"fixed": "dof"}, ["dof", "'gaussian'"]),
    ({"likelihood": "poisson", "fixed": "dispersion"}, ["dispersion", "'poisson'", "none"]),
])
def test_a_name_the_likelihood_does_not_have_is_refused_in_one_line(curve, kwargs, words):
    x, y = curve
    with pytest.raises(ValueError) as error:
        SparseGPRegressor(num_inducing=5, max_iter=1, **kwargs).fit(x, np.round(np.abs(y)))
    message = str(error.value)
    assert "\n" not in message and all(word in message for word in words), message


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_pep_train_takes_fixed_from_set_and_the_run_keeps_it_through_load_and_predict(regression_store, tmp_path):
    """``--set model.fixed=noise_variance``: the run's noise has the bits it started from, the manifest records
    the name, ``pep_gp.load`` gives an estimator with it, and ``pep predict`` reads the run."""
    settings = parse_settings(["model.fixed=noise_variance", "model.noise_variance=0.2", "model.num_inducing=4"])
    train(TrainJob("sparse-gp-regressor", regression_store, TrainConfig(max_steps=5, batch_size=1000, **settings),
                   tmp_path / "run"))
    loaded = pep_gp.load(tmp_path / "run")
    assert loaded.fixed == ("noise_variance",)
    assert bits(loaded.params_.likelihood["raw_noise_variance"]) == bits(
        loaded.model_.likelihood.init_params(0.2)["raw_noise_variance"])
    x = regression_store.arrays("train")[0][:5]
    pd.DataFrame(x, columns=[f"x{i}" for i in range(x.shape[1])]).to_csv(tmp_path / "new.csv", index=False)
    done = CliRunner().invoke(app, ["predict", "--run-dir", str(tmp_path / "run"), "--input", str(tmp_path / "new.csv"),
                                    "--out", str(tmp_path / "p.csv")])
    assert done.exit_code == 0, done.output
    np.testing.assert_allclose(pd.read_csv(tmp_path / "p.csv")["mean"], loaded.predict(x), rtol=1e-6)
