"""``sparse-gp-regressor`` and ``sparse-gp-classifier``: one sparse GP with a tied Power-EP factor
(seed000, :class:`pep_gp.core.models.power_ep.PowerEPSparseGP`) and a Gaussian or probit likelihood."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax.scipy.special import log_ndtr
from pydantic import Field

from ...core.likelihoods import Gaussian, Probit
from ...core.models.power_ep import PowerEPSparseGP, SparseGPParams
from ..data.blocks import TargetScaling
from ..errors import InputError
from ..training.metrics import classification_sums, regression_sums
from .protocol import ModelSettings
from .registry import register

# Initial noise variance of the Gaussian likelihood in standardised target units: var(y)/100, as the
# seed000 reference code.
INITIAL_NOISE_VARIANCE = 0.01


class SparseGPSettings(ModelSettings):
    """Settings of the tied Power-EP sparse GPs."""

    alpha: float = Field(0.5, ge=0.0, le=1.0, description="Power-EP power: 0 VFE limit, 1 EP (seed000 §5: 0.5)")
    ard: bool = Field(True, description="one lengthscale per input (ARD); false: one shared by all inputs")


def check_task(spec: Any, data: Any, n_classes: int | None = None) -> None:
    """InputError unless ``data`` holds ``spec``'s task (and, for classification, ``n_classes`` classes)."""
    if data.task != spec.task:
        raise InputError(f"{data.path}: --model {spec.name} needs a {spec.task} store; this store holds a "
                         f"{data.task} task")
    if n_classes is not None and data.n_classes != n_classes:
        raise InputError(f"{data.path}: --model {spec.name} is binary and needs 2 classes; this store has "
                         f"{data.n_classes} (for airline, ingest with --target delayed)")


def check_inducing(settings: ModelSettings, rows: int) -> None:
    """InputError unless there are at least ``num_inducing`` rows to place the inducing inputs."""
    if settings.num_inducing > rows:
        raise InputError(f"num_inducing = {settings.num_inducing} exceeds the {rows} training rows available "
                         "to place inducing inputs")


def regression_targets(data: Any) -> TargetScaling:
    """Standardised regression targets (the training split's mean and deviation)."""
    return TargetScaling(float(data.attrs["y_mean"]), float(data.attrs["y_std"]))


def fixed_inducing(params: Any, settings: ModelSettings) -> Any:
    """``frozen`` mask: every leaf trainable but the inducing inputs unless ``train_inducing``."""
    return jax.tree_util.tree_map(lambda _: False, params)._replace(inducing=not settings.train_inducing)


@dataclass(frozen=True)
class ProbitHeldOut:
    """Per-block held-out sums of a probit classifier: ``log p(y|x) = log Φ(s m/√(1+v))``."""

    model: Any  # predict_f(params, x) -> (mean, var) of the latent function

    def __call__(self, params, x, y, mask):
        mean, var = self.model.predict_f(params, x)
        z = (2.0 * y - 1.0) * mean / jnp.sqrt(1.0 + var)
        return classification_sums(log_ndtr(z), z > 0, mask)


@dataclass(frozen=True)
class GaussianHeldOut:
    """Per-block held-out sums of a regressor, with predictions mapped back to target units."""

    model: Any  # predict_y(params, x) -> (mean, var) in model units
    targets: TargetScaling

    def __call__(self, params, x, y, mask):
        mean, var = self.model.predict_y(params, x)
        scale = self.targets.scale
        return regression_sums(mean * scale, var * scale**2, y * scale, mask)


@dataclass(frozen=True)
class SparseGPSpec:
    """A tied Power-EP sparse GP bound to a task (the :class:`~pep_gp.pipeline.models.ModelSpec` protocol)."""

    name: str
    task: str
    description: str
    Settings = SparseGPSettings
    has_sites = False

    def check(self, data: Any, settings: SparseGPSettings, block_rows: int) -> None:
        check_task(self, data, 2 if self.task == "classification" else None)

    def binding(self, data: Any) -> dict[str, Any]:
        return {}

    def build(self, settings: SparseGPSettings, binding: dict[str, Any]) -> PowerEPSparseGP:
        likelihood = Gaussian() if self.task == "regression" else Probit()
        return PowerEPSparseGP(likelihood, alpha=settings.alpha, jitter=settings.jitter)

    def init(self, model: PowerEPSparseGP, x, settings: SparseGPSettings, seed: int) -> SparseGPParams:
        """k-means inducing inputs, median-distance lengthscales (``ard``: one per input), unit kernel variance."""
        check_inducing(settings, x.shape[0])
        likelihood = (Gaussian.init_params(INITIAL_NOISE_VARIANCE) if self.task == "regression"
                      else Probit.init_params())
        return model.init(x, settings.num_inducing, variance=1.0, likelihood_params=likelihood, seed=seed,
                          ard=settings.ard)

    def frozen(self, settings: SparseGPSettings, params: SparseGPParams) -> SparseGPParams:
        return fixed_inducing(params, settings)

    def targets(self, data: Any) -> TargetScaling:
        return regression_targets(data) if self.task == "regression" else TargetScaling()

    def held_out(self, model: PowerEPSparseGP, targets: TargetScaling) -> Callable:
        return GaussianHeldOut(model, targets) if self.task == "regression" else ProbitHeldOut(model)


REGRESSOR = register(SparseGPSpec("sparse-gp-regressor", "regression",
                                  "Power-EP sparse GP regression (Gaussian likelihood, tied factor)"))
CLASSIFIER = register(SparseGPSpec("sparse-gp-classifier", "classification",
                                   "Power-EP sparse GP binary classification (probit likelihood, tied factor)"))
