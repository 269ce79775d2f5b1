"""Mean functions as users give them (issue 65, item 2): ``mean_function=`` on the estimators (a name, a table, a
user's registered pytree), a linear trend's slope recovered, the fitted ``mean_function_`` in the data's units,
a saved run that rebuilds its mean and predicts bit-identically, ``[model] mean_function``/``--set`` through the
settings, and the models without a mean refusing one in one line."""

from __future__ import annotations

import warnings

import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning

from pep_gp import CollapsedGPRegressor, SparseGPRegressor, load
from pep_gp.means import Linear, MeanFunction, register_mean
from pep_gp.pipeline.errors import InputError
from pep_gp.pipeline.models import get_model, model_settings
from pep_gp.pipeline.models.protocol import ModelSettings
from pep_gp.pipeline.runs.config import load_config, parse_settings
from tests import oracles


@register_mean("test-pipeline-quadratic")
class Quadratic(MeanFunction):
    """A user's own mean, ``a·x₀² + c``, registered so that a saved run can name it."""

    parameters = ("a", "c")

    def __call__(self, x):
        return self.a * x[:, 0] ** 2 + self.c


def _fit(estimator, x, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return estimator.fit(x, y)


SLOPE, INTERCEPT, LS, GP_VAR, NOISE = 3.0, 5.0, 1.0, 0.09, 0.01


@pytest.mark.heavy  # a fit: ~15 s on 2 shared cores
def test_a_linear_mean_recovers_a_linear_trends_slope():
    """``y = a·x + b + g(x) + ε`` with ``g`` a small SE GP: the fitted slope (in the data's units) lies within 4
    standard errors of ``a``, the generalised least-squares error ``√[(XᵀC⁻¹X)⁻¹]_aa`` under the generating
    covariance ``C = K + σ²I`` (Rasmussen & Williams 2006, §2.7: the best any estimator of the trend can do;
    here 0.03, so the tolerance is ~4 % of the slope)."""
    rng = np.random.default_rng(7)
    x = np.sort(rng.uniform(0.0, 10.0, 120))[:, None]
    cov = oracles.se_kernel(x, x, np.array([LS]), GP_VAR) + NOISE * np.eye(len(x))
    y = SLOPE * x[:, 0] + INTERCEPT + np.linalg.cholesky(cov) @ rng.standard_normal(len(x))
    design = np.column_stack([x[:, 0], np.ones(len(x))])
    standard_error = np.sqrt(np.linalg.inv(design.T @ np.linalg.solve(cov, design))[0, 0])
    model = _fit(CollapsedGPRegressor(mean_function="linear", num_inducing=20, alpha=0.0), x, y)
    fitted = model.mean_function_
    assert isinstance(fitted, Linear)
    assert abs(fitted.weights[0] - SLOPE) < 4 * standard_error
    trained = model.params_.mean(jnp.asarray((x - model.x_mean_) / model.x_std_))
    np.testing.assert_allclose(fitted(jnp.asarray(x)), trained * model.targets_.scale + model.targets_.shift, rtol=1e-12)


@pytest.mark.exhaustive
@pytest.mark.heavy  # a fit, a save and a load: ~30 s on 2 shared cores
def test_a_users_pytree_mean_fits_predicts_and_a_saved_run_rebuilds_it(tmp_path):
    """A registered pytree mean trains with the rest (its parameters move from their start), carries the
    predictions far from the data (where the GP reverts to its mean) and comes back from a saved run with the
    same values and the same predictions, bit for bit; ``sample_f`` draws about the shifted mean."""
    rng = np.random.default_rng(3)
    x = rng.uniform(-2.0, 2.0, (60, 1))
    y = 2.0 * x[:, 0] ** 2 + 0.1 * np.sin(5 * x[:, 0]) + 0.05 * rng.standard_normal(60)
    model = _fit(SparseGPRegressor(mean_function=Quadratic(), num_inducing=8, max_iter=200), x, y)
    assert isinstance(model.params_.mean, Quadratic) and float(model.params_.mean.a) != 0.0
    # 10 fitted lengthscales away (in the data's units), where the predictive mean is the prior's; a fixed point
    # is not far: with the quadratic mean the fit's lengthscale is ~25 standardised units
    reach = 10 * float(np.max(model.params_.kernel.lengthscales.value)) * model.x_std_[0]
    far = np.array([[reach], [-1.2 * reach]])
    np.testing.assert_allclose(model.predict(far), model.mean_function_(jnp.asarray(far)), rtol=1e-3)
    draws = model.sample_f(far, n_samples=200, seed=1)
    mean, cov = model.predict_f(far, full_cov=True)
    assert np.all(np.abs(draws.mean(0) - mean) < 5 * np.sqrt(np.diag(cov) / 200))
    model.save(tmp_path / "run")
    loaded = load(tmp_path / "run")
    assert repr(loaded.params_.mean) == repr(model.params_.mean)
    np.testing.assert_array_equal(loaded.predict(x), model.predict(x))
    assert loaded.get_params()["mean_function"] == {"name": "test-pipeline-quadratic", "a": 0.0, "c": 0.0}


def test_the_mean_table_and_set_are_validated_by_the_model_settings():
    given = Linear(bias=0.5)
    assert clone(SparseGPRegressor(mean_function=given)).get_params()["mean_function"] == given
    spec = get_model("sparse-gp-regressor")
    config = load_config(None, settings=parse_settings(["model.mean_function=linear"]))
    assert model_settings(spec, config.model).mean_function == {"name": "linear", "bias": 0.0}
    table = {"mean_function": {"name": "constant", "constant": 0.5}}
    assert model_settings(spec, table).mean_function == {"name": "constant", "constant": 0.5}
    assert model_settings(spec, {"mean_function": "zero"}).mean_function is None  # the default, bit for bit
    with pytest.raises(InputError, match=r"model.mean_function: Value error, unknown mean function 'linaer'.*"
                                         r"did you mean 'linear'"):
        model_settings(spec, {"mean_function": "linaer"})


def test_a_model_without_a_mean_refuses_one_in_one_line():
    """Every built-in model carries a mean; a model of one's own whose settings do not say it does (``takes_mean``)
    refuses one rather than leave it out of its energy."""
    class Plain(ModelSettings):
        pass

    with pytest.raises(ValueError, match=r"mean_function\n  Value error, this model takes the zero mean only[^\n]*"
                                         r"leave out mean_function"):
        Plain(mean_function="linear")
    assert Plain(mean_function="zero").mean_function is None


@pytest.mark.exhaustive
@pytest.mark.heavy  # a store run and a load: ~25 s on 2 shared cores
def test_a_store_run_trains_the_configs_mean_and_a_loaded_run_reports_it(regression_store, tmp_path):
    """``pep train``'s path: ``[model] mean_function = "linear"`` trains a linear mean with the rest; the loaded
    run's mean is the trained one to the bit, reported in the store's units."""
    from pep_gp.pipeline.training.trainer import TrainJob, train
    from tests.trainstores import FAST

    config = FAST.model_copy(update={"model": {**FAST.model, "mean_function": "linear"}, "epochs": 2})
    result = train(TrainJob("sparse-gp-regressor", regression_store, config, tmp_path / "run"))
    assert isinstance(result.params.mean, Linear) and np.any(np.asarray(result.params.mean.weights) != 0.0)
    loaded = load(tmp_path / "run")
    np.testing.assert_array_equal(loaded.params_.mean.weights, result.params.mean.weights)
    mean, std = (np.asarray(regression_store.attrs[k]) for k in ("x_mean", "x_std"))
    shift, scale = float(regression_store.attrs["y_mean"]), float(regression_store.attrs["y_std"])
    expected = result.params.mean.in_data_units(mean, std, shift, scale)
    assert repr(loaded.mean_function_) == repr(expected)
