"""Priors from the estimators, ``pep train`` and saved runs (issue 65, item 1): a collapsed regression with
strong priors fits to scipy.optimize's optimum of the numpy MAP objective; on a tiny table a prior keeps the
lengthscale from collapsing; a saved run keeps its priors; a model that cannot take them refuses in one line."""

from __future__ import annotations


import numpy as np
import pytest
import scipy.optimize
from scipy import stats

import pep_gp
from pep_gp import CollapsedGPRegressor, SparseGPClassifier, SparseGPRegressor
from pep_gp.core import float64
from pep_gp.core.log_prior import log_prior
from pep_gp.core.priors import Gamma, HalfNormal, LogNormal
from pep_gp.kernels import SquaredExponential
from pep_gp.pipeline.models import ModelSettings, model_settings
from pep_gp.pipeline.models.protocol import settings_kernel
from pep_gp.pipeline.models.sparse_gp import REGRESSOR
from pep_gp.pipeline.runs.config import TrainConfig, load_config, parse_settings
from pep_gp.pipeline.runs.run import load_run
from pep_gp.pipeline.training.trainer import TrainJob, train

from tests.core.test_priors import numpy_map_objective
from tests.trainstores import leaves_equal
from tests.fits import fit


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_a_collapsed_fit_with_strong_priors_reaches_scipys_optimum_of_the_numpy_objective():
    rng = np.random.default_rng(5)
    x = np.sort(rng.uniform(-2, 2, 12))[:, None]
    y = np.sin(1.5 * x[:, 0]) + 0.3 * rng.normal(size=12)
    priors = (LogNormal(np.log(0.4), 0.2), Gamma(3.0, 2.0), Gamma(2.0, 20.0))
    model = fit(CollapsedGPRegressor(inducing_points=x, train_inducing=False, jitter=0.0, solver="lbfgs", tol=0.0,
                                     max_iter=500, kernel=SquaredExponential(
                                         prior={"lengthscales": priors[0], "variance": priors[1]}),
                                     prior={"noise_variance": priors[2]}), x, y)
    xs, ys = model.x_train_, model.y_train_
    scipy_priors = (stats.lognorm(s=0.2, scale=0.4), stats.gamma(a=3.0, scale=0.5), stats.gamma(a=2.0, scale=0.05))

    def negative(raw):
        return -numpy_map_objective(xs, ys, np.exp(raw[0]), np.exp(raw[1]), np.logaddexp(0.0, raw[2]), scipy_priors)

    best = scipy.optimize.minimize(negative, np.array([0.0, 0.0, np.log(np.expm1(0.01))]), method="Nelder-Mead",
                                   options={"xatol": 1e-10, "fatol": 1e-13, "maxiter": 20000}).x
    ours = np.array([float(model.params_.kernel.lengthscales.raw[0, 0]), float(model.params_.kernel.variance.raw[0]),
                     float(model.params_.raw_noise_variance)])
    np.testing.assert_allclose(ours, best, atol=1e-5)
    assert float(negative(ours)) == pytest.approx(float(negative(best)), abs=1e-9)
    free = fit(CollapsedGPRegressor(inducing_points=x, train_inducing=False, jitter=0.0, solver="lbfgs", tol=0.0,
                                    max_iter=500), x, y)
    assert abs(float(free.params_.kernel.lengthscales.raw[0, 0]) - ours[0]) > 0.05  # the priors changed the answer


@pytest.fixture(scope="module")
def tiny():
    """Eight rows of noise on [0, 1]: maximum likelihood explains them with a lengthscale far below their spacing."""
    rng = np.random.default_rng(2)
    return np.sort(rng.uniform(0, 1, 8))[:, None], rng.normal(size=8)


@pytest.mark.exhaustive
@pytest.mark.heavy
@pytest.mark.xfail(strict=True, reason="L-BFGS's stopping rule (two iterations each rising less than tol nats per "
                   "row) fires near a saddle at a lengthscale of 0.154: the rises fall to 1e-5 nats, then grow again "
                   "as L-BFGS leaves along a direction of upward curvature for the prior's optimum at 1.0, 5 nats "
                   "higher, which tol=1e-7 or Adam reach (issue 63's fourteenth-session note)")
def test_on_a_tiny_table_a_prior_keeps_the_lengthscale_from_collapsing(tiny):
    x, y = tiny
    free = fit(SparseGPRegressor(num_inducing=8), x, y)
    held = fit(SparseGPRegressor(num_inducing=8, kernel=SquaredExponential(prior={"lengthscales": Gamma(4.0, 4.0)})),
               x, y)
    spacing = np.median(np.diff(model_units(free, x)))
    assert float(free.params_.kernel.lengthscales.value[0, 0]) < 0.2 * spacing
    assert float(held.params_.kernel.lengthscales.value[0, 0]) > 0.5 * spacing


def model_units(model, x):
    return (x[:, 0] - model.x_mean_[0]) / model.x_std_[0]


@pytest.mark.heavy
def test_a_saved_run_keeps_its_priors_and_predicts_the_same(tiny, tmp_path):
    x, y = tiny
    kernel = SquaredExponential(prior={"lengthscales": Gamma(4.0, 4.0)})
    model = fit(SparseGPRegressor(num_inducing=8, kernel=kernel, prior={"noise_variance": HalfNormal(0.5)},
                                  max_iter=20), x, y)
    model.save(tmp_path / "run")
    loaded = pep_gp.load(tmp_path / "run")
    assert loaded.kernel == kernel.to_dict() and loaded.prior == {"noise_variance": {"name": "half-normal", "scale": 0.5}}
    assert loaded.model_ == model.model_ and loaded.model_.priors == (("raw_noise_variance", HalfNormal(0.5)),)
    np.testing.assert_array_equal(loaded.predict(x), model.predict(x))


@pytest.mark.heavy
def test_pep_train_takes_priors_from_the_model_tables(regression_store, tmp_path):
    """``[model.kernel]`` with a ``prior`` table and ``[model.prior]``: the run records both and loads with them."""
    model = {"num_inducing": 4, "kernel": {"name": "se", "prior": {"lengthscales": {"name": "log-normal", "sigma": 0.1}}},
             "prior": {"noise_variance": {"name": "gamma", "shape": 2.0, "rate": 10.0}}}
    train(TrainJob("sparse-gp-regressor", regression_store, TrainConfig(max_steps=3, batch_size=1000, model=model),
                   tmp_path / "map"))
    recorded = load_run(tmp_path / "map").meta["model_settings"]
    assert recorded["kernel"]["prior"] == {"lengthscales": {"name": "log-normal", "mean": 0.0, "sigma": 0.1}}
    assert recorded["prior"] == {"noise_variance": {"name": "gamma", "shape": 2.0, "rate": 10.0}}
    assert pep_gp.load(tmp_path / "map").model_.priors == (("raw_noise_variance", Gamma(2.0, 10.0)),)


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_a_minibatch_step_adds_the_log_prior_once_not_scaled_by_the_rows(curve):
    """With minibatches of 20 of 60 rows the step's estimate is ``G + log p(θ) + (N/|B|)·Σ_B L``: the first step's
    energy with priors exceeds the same step's without them by exactly ``log p`` at the starting params."""
    x, y = curve
    settings = dict(num_inducing=5, solver="adam", batch_size=20, seed=3)
    priors = dict(kernel=SquaredExponential(prior={"lengthscales": Gamma(4.0, 4.0), "variance": LogNormal(0.0, 0.5)}),
                  prior={"noise_variance": HalfNormal(0.3)})
    with_prior = fit(SparseGPRegressor(max_iter=1, **settings, **priors), x, y)
    without = fit(SparseGPRegressor(max_iter=1, **settings), x, y)
    start = fit(SparseGPRegressor(max_iter=0, **settings, **priors), x, y)
    with float64():
        term = float(log_prior(start.params_, start.model_.priors))
    assert with_prior.energy_trace_[0] - without.energy_trace_[0] == pytest.approx(term, rel=1e-9, abs=1e-9)


@pytest.fixture(scope="module")
def curve():
    rng = np.random.default_rng(4)
    x = rng.uniform(-3, 3, (60, 1))
    return x, np.sin(x[:, 0]) + 0.3 * rng.normal(size=60)


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_the_classifier_takes_a_kernel_prior(tiny):
    x, _ = tiny
    labels = (x[:, 0] > 0.5).astype(int)
    model = fit(SparseGPClassifier(num_inducing=4, max_iter=2, kernel=SquaredExponential(
        prior={"variance": LogNormal()})), x, labels)
    assert model.params_.kernel.prior == (("variance", LogNormal()),)


def test_a_model_without_priors_refuses_a_kernels_prior_in_one_line():
    """Every built-in model takes a kernel's prior; a model of one's own whose settings do not say it does
    (``takes_priors``) refuses one rather than leave it out of its energy."""
    class Plain(ModelSettings):
        pass

    with pytest.raises(ValueError, match=r"kernel: this model takes no priors[^\n]*leave out the kernel's prior="):
        Plain(kernel=SquaredExponential(prior={"variance": LogNormal()}))


@pytest.mark.parametrize("estimator", [
    lambda: SparseGPRegressor(prior={"lengthscales": LogNormal()}),
    lambda: SparseGPRegressor(prior={"noise_variance": {"name": "beta"}}),
])
def test_a_prior_a_model_cannot_take_is_refused_in_one_line(tiny, estimator):
    x, y = tiny
    with pytest.raises(ValueError) as error:
        estimator().fit(x, (y > 0).astype(int))
    assert "\n" not in str(error.value) and "prior" in str(error.value), str(error.value)


@pytest.mark.heavy
def test_a_map_fit_in_process_and_on_two_workers_is_bit_identical(curve, cluster):
    """The prior is part of the global term, computed where the step is: minibatch Adam steps with priors and
    another optimiser give the same bits on a local two-worker cluster as in this process."""
    x, y = curve
    settings = dict(num_inducing=5, solver="adam", batch_size=20, max_iter=6, learning_rate=0.001,
                    optimizer={"name": "sgd", "momentum": 0.9},
                    kernel=SquaredExponential(prior={"lengthscales": Gamma(4.0, 4.0)}),
                    prior={"noise_variance": HalfNormal(0.3)}, fixed="noise_variance")
    here = fit(SparseGPRegressor(**settings), x, y)
    there = fit(SparseGPRegressor(**settings, cluster=cluster.client), x, y)
    assert leaves_equal(here.params_, there.params_)
    np.testing.assert_array_equal(here.energy_trace_, there.energy_trace_)


def test_the_how_to_s_toml_and_set_give_the_priors(tmp_path):
    """The ``[model.kernel]`` and ``[model.prior]`` tables of docs/how-to/kernels.md, and the same by ``--set``."""
    path = tmp_path / "train.toml"
    path.write_text('[model.kernel]\nname = "se"\nprior = { lengthscales = { name = "gamma", shape = 4.0, rate = 4.0 } }\n'
                    '\n[model.prior]\nnoise_variance = { name = "half-normal", scale = 0.5 }\n')
    by_set = parse_settings(["model.kernel.name=se", "model.kernel.prior.lengthscales.name=gamma",
                             "model.kernel.prior.lengthscales.shape=4.0", "model.kernel.prior.lengthscales.rate=4.0",
                             "model.prior.noise_variance.name=half-normal", "model.prior.noise_variance.scale=0.5"])
    for config in (load_config(path), load_config(None, settings=by_set)):
        settings = model_settings(REGRESSOR, config.model)
        assert settings.leaf_priors() == (("raw_noise_variance", HalfNormal(0.5)),)
        assert settings_kernel(settings).prior == (("lengthscales", Gamma(4.0, 4.0)),)
