"""A new model is one mathematics module plus one spec: this file defines both for a model pep does not
ship (MAP Bayesian linear regression), registers it, and trains it with checkpoints, resume and
held-out evaluation — without touching ``src/pep_gp/pipeline/`` or ``src/pep_gp/flows/``."""

from __future__ import annotations

from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np
import pytest
from pydantic import Field

from pep_gp.pipeline.data.blocks import TargetScaling
from pep_gp.pipeline.runs.config import TrainConfig
from pep_gp.pipeline.training.trainer import TrainJob, train
from pep_gp.pipeline.runs.run import evaluate, load_run
from pep_gp.pipeline.models import MODELS, ModelSettings, SpecBase, get_model, register
from tests.trainstores import leaves_equal, make_store


# -- the mathematics (what would be a pep_gp.core module) ----------------------------------------------
@dataclass(frozen=True)
class LinearRegression:
    """``y = xᵀw + b + ε``, ``ε ~ N(0, σ²)``, ``w ~ N(0, I/λ)``; the energy is the log joint in
    ``(w, b)`` at ``σ``. The step-shared quantity is ``σ²``, so the trainer's chain rule through ``S`` is
    exercised by a model it has never seen."""

    prior_precision: float

    def step_shared(self, params, n_total):
        return {"variance": jnp.exp(2.0 * params["log_sigma"])}

    def global_energy(self, params, shared, n_total):
        return -0.5 * self.prior_precision * jnp.sum(params["w"] ** 2)

    def data_energy(self, params, shared, x, y, mask):
        residual = y - x @ params["w"] - params["b"]
        log_density = -0.5 * (jnp.log(2 * jnp.pi * shared["variance"]) + residual**2 / shared["variance"])
        return jnp.sum(jnp.where(mask, log_density, 0.0))

    def predict_y(self, params, x):
        return x @ params["w"] + params["b"], jnp.full(x.shape[0], jnp.exp(2.0 * params["log_sigma"]))


# -- the spec ----------------------------------------------------------------------------------------
class LinearSettings(ModelSettings):
    prior_precision: float = Field(1.0, gt=0.0)
    sigma: float = Field(0.5, gt=0.0)


@dataclass(frozen=True)
class LinearSpec(SpecBase):
    """A spec is its settings, ``build`` and ``init``, plus what it changes of :class:`SpecBase`'s defaults."""

    name: str = "map-linear"
    task: str = "regression"
    description: str = "MAP Bayesian linear regression (a model defined outside pep)"
    Settings = LinearSettings

    def build(self, settings, binding):
        return LinearRegression(settings.prior_precision)

    def init(self, model, x, settings, seed):
        return {"w": jnp.zeros(x.shape[1]), "b": jnp.zeros(()), "log_sigma": jnp.log(jnp.asarray(settings.sigma))}

    def frozen(self, settings, params):
        return {"w": False, "b": False, "log_sigma": True}  # σ stays at its setting

    def targets(self, data, settings=None):
        return TargetScaling()  # the closed form below is in the stored units


@pytest.fixture
def linear_model():
    spec = register(LinearSpec())
    yield spec
    MODELS.pop(spec.name)


CONFIG = TrainConfig(model={"sigma": 0.5, "prior_precision": 2.0}, learning_rate=0.05, epochs=300, batch_size=400,
                     block_rows=100, checkpoint_every=40, keep_checkpoints=2)


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_a_model_defined_here_trains_resumes_and_evaluates(linear_model, tmp_path):
    regression_store = make_store(tmp_path / "regression.zarr", task="regression")
    assert get_model("map-linear") is linear_model
    whole = train(TrainJob("map-linear", regression_store, CONFIG, tmp_path / "whole"))
    assert whole.steps == 300 and whole.rejected_steps == 0

    # the maximiser of the energy in closed form: ridge regression on the standardised inputs
    x, y = (a[:].astype(np.float64) for a in regression_store.arrays("train"))
    x = (x - np.asarray(regression_store.attrs["x_mean"])) / np.asarray(regression_store.attrs["x_std"])
    design = np.hstack([x, np.ones((len(x), 1))])
    penalty = np.diag([2.0 * 0.25] * x.shape[1] + [0.0])  # λσ² on w, nothing on b
    expected = np.linalg.solve(design.T @ design + penalty, design.T @ y)
    np.testing.assert_allclose(np.append(whole.params["w"], whole.params["b"]), expected, atol=2e-3)
    assert float(whole.params["log_sigma"]) == pytest.approx(np.log(0.5), rel=0, abs=0)  # frozen

    cut = train(TrainJob("map-linear", regression_store, CONFIG, tmp_path / "cut"), until_step=130)
    assert cut.steps == 130 and sorted(p.name for p in (tmp_path / "cut/checkpoints").iterdir()) == [
        "step-00000120", "step-00000130"]
    resumed = train(TrainJob("map-linear", regression_store, CONFIG, tmp_path / "cut"), resume=True)
    assert leaves_equal(resumed.params, whole.params)
    assert leaves_equal(load_run(tmp_path / "cut").trees["params"], whole.params)

    metrics = evaluate(tmp_path / "cut")
    x_test, y_test = (a[:].astype(np.float64) for a in regression_store.arrays("test"))
    x_test = (x_test - np.asarray(regression_store.attrs["x_mean"])) / np.asarray(regression_store.attrs["x_std"])
    ridge_rmse = np.sqrt(np.mean((np.hstack([x_test, np.ones((len(x_test), 1))]) @ expected - y_test) ** 2))
    assert metrics["n_test"] == len(y_test) and metrics["rmse"] == pytest.approx(ridge_rmse, rel=1e-3)
    assert metrics["rmse"] == whole.history[-1]["rmse"]


@pytest.mark.heavy
def test_pep_gp_load_gives_a_fitted_estimator_of_a_model_defined_here(linear_model, tmp_path):
    """Issue 37, item 8: the estimator registry is open. ``pep_gp.load`` of a run of a model registered
    outside pep (with no estimator class of its own) gives an estimator, made for the spec, that predicts
    the model's predictive; a plugin's own ``GPEstimator`` subclass is the one ``load`` uses."""
    from sklearn.base import RegressorMixin

    from pep_gp import load
    from pep_gp.pipeline.data.transforms import transforms_of
    from pep_gp.pipeline.estimators.base import ESTIMATORS, GPEstimator
    from pep_gp.pipeline.estimators.fitted import GPRegressorMixin

    store = make_store(tmp_path / "regression.zarr", task="regression")
    config = CONFIG.model_copy(update={"epochs": 2})
    result = train(TrainJob("map-linear", store, config, tmp_path / "run"))
    try:
        loaded = load(tmp_path / "run")
        assert loaded.spec is linear_model and isinstance(loaded, RegressorMixin) and loaded.n_iter_ == result.steps
        stored = store.arrays("test")[0][:].astype(np.float64)
        mean, std = loaded.predict(stored + transforms_of(store).offsets, return_std=True)  # the table's values
        z = (stored - np.asarray(store.attrs["x_mean"])) / np.asarray(store.attrs["x_std"])
        np.testing.assert_allclose(mean, z @ np.asarray(result.params["w"]) + float(result.params["b"]), rtol=1e-12)
        np.testing.assert_allclose(std, 0.5, rtol=1e-12)  # the model's σ, frozen at its setting

        class LinearEstimator(GPRegressorMixin, RegressorMixin, GPEstimator):
            spec = linear_model

        assert type(load(tmp_path / "run")) is LinearEstimator
    finally:
        ESTIMATORS.pop("map-linear", None)


PLUGIN = LinearSpec(name="map-linear-plugin")


def test_an_installed_package_registers_a_model_through_its_entry_point(tmp_path, monkeypatch):
    """A distribution on the path whose ``pep_gp.models`` entry point names a spec: ``get_model`` (what
    ``pep train --model`` calls) finds it without any import by the user."""
    info = tmp_path / "pep_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pep-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[pep_gp.models]\nmap-linear-plugin = tests.test_extending:PLUGIN\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "map-linear-plugin" not in MODELS
    try:
        assert get_model("map-linear-plugin") is PLUGIN
    finally:
        MODELS.pop("map-linear-plugin", None)
