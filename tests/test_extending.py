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
from pep_gp.pipeline.training.config import TrainConfig
from pep_gp.pipeline.training.trainer import TrainJob, train
from pep_gp.pipeline.training.runs import evaluate, load_run
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
