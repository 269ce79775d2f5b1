"""``sparse-gp-regressor`` and ``sparse-gp-classifier``: one sparse GP with a tied Power-EP factor (Bui, Yan &
Turner 2017, :class:`pep_gp.core.models.power_ep.PowerEPSparseGP`) and a Gaussian or probit likelihood.

The regressor's tied factor moves by stochastic EP updates with the exact Power-EP sites of the Gaussian
likelihood (a full batch sets it to the collapsed PEP-α posterior in one step), its hyper-parameters and
inducing inputs by Adam; the classifier's whole state moves by Adam on the energy.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field

from ...core.likelihoods import Gaussian, Probit
from ...core.models.power_ep import PowerEPSparseGP, SparseGPParams
from ..errors import InputError
from .protocol import ModelSettings, SiteSettings, SpecBase, leaves_named, settings_kernel
from .registry import register

# Initial noise variance of the Gaussian likelihood in standardised target units: var(y)/100, as the
# reference code of Bui, Yan & Turner (2017).
INITIAL_NOISE_VARIANCE = 0.01


class SparseGPSettings(ModelSettings):
    """Settings of the tied Power-EP sparse GPs."""

    alpha: float = Field(0.5, ge=0.0, le=1.0, description="Power-EP power: 0 VFE limit, 1 EP (Bui et al. 2017 recommend 0.5)")
    ard: bool = Field(False, description="one lengthscale per input (ARD); false: one shared by the standardised inputs")


def check_inducing(settings: ModelSettings, rows: int) -> None:
    """InputError unless there are at least ``num_inducing`` rows to place the inducing inputs."""
    if settings.num_inducing > rows:
        raise InputError(f"num_inducing = {settings.num_inducing} exceeds the {rows} training rows available "
                         "to place inducing inputs")


@dataclass(frozen=True)
class SparseGPSpec(SpecBase):
    """A tied Power-EP sparse GP bound to a task."""

    Settings = SparseGPSettings
    parameterisation = "3"  # 3: a kernel pytree (pep_gp.core.kernels); 2: log amplitude and lengthscales; 1: softplus

    @property
    def n_classes(self) -> int | None:
        return 2 if self.task == "classification" else None

    def build(self, settings: SparseGPSettings, binding: dict) -> PowerEPSparseGP:
        likelihood = Gaussian() if self.task == "regression" else Probit()
        return PowerEPSparseGP(likelihood, alpha=settings.alpha, jitter=settings.jitter)

    def init(self, model: PowerEPSparseGP, x, settings: SparseGPSettings, seed: int) -> SparseGPParams:
        """k-means inducing inputs and the settings' kernel (default a squared exponential of unit variance),
        an unset lengthscale the median distance (``ard``: one per input)."""
        check_inducing(settings, x.shape[0])
        likelihood = (Gaussian.init_params(getattr(settings, "noise_variance", INITIAL_NOISE_VARIANCE))
                      if self.task == "regression" else Probit.init_params())
        return model.init(x, settings.num_inducing, kernel=settings_kernel(settings), likelihood_params=likelihood,
                          seed=seed, ard=settings.ard)


class SparseGPRegressionSettings(SiteSettings, SparseGPSettings):
    """Settings of the regressor: the sparse GP's, the damping of its exact site updates and the starting noise."""

    noise_variance: float = Field(INITIAL_NOISE_VARIANCE, gt=0.0, description="starting noise variance, in "
                                  "standardised target units (the training targets' variance is 1)")


@dataclass(frozen=True)
class SparseGPRegressorSpec(SparseGPSpec):
    """The tied Power-EP sparse GP with a Gaussian likelihood, its factor moved by exact site updates."""

    Settings = SparseGPRegressionSettings
    has_sites = True

    def build(self, settings: SparseGPRegressionSettings, binding: dict) -> PowerEPSparseGP:
        return PowerEPSparseGP(Gaussian(), alpha=settings.alpha, jitter=settings.jitter, site_updates=True)

    def frozen(self, settings: SparseGPRegressionSettings, params: SparseGPParams) -> SparseGPParams:
        """The factor moves only by site updates; the inducing inputs unless ``train_inducing``."""
        fixed = {"factor_shift", "factor_chol"} | (set() if settings.train_inducing else {"inducing"})
        return leaves_named(params, fixed)


REGRESSOR = register(SparseGPRegressorSpec("sparse-gp-regressor", "regression",
                                  "Power-EP sparse GP regression (Gaussian likelihood, tied factor moved by exact "
                                  "site updates)"))
CLASSIFIER = register(SparseGPSpec("sparse-gp-classifier", "classification",
                                   "Power-EP sparse GP binary classification (probit likelihood, tied factor)"))
