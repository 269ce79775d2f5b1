"""``tied-ep-classifier``: binary probit GP classification whose tied factor moves by stochastic EP
(``projection = "kl"``) or stochastic Quantile Propagation (``"wasserstein"``, Zhang et al. 2020) site updates
(:class:`pep_gp.core.models.tied_ep.TiedEPClassifier`), minibatched and distributed like every model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from ...core.models.tied_ep import TiedEPClassifier, TiedEPParams
from .protocol import SiteSettings, SpecBase, settings_kernel, settings_mean
from .registry import register
from .sparse_gp import check_inducing


class TiedEPSettings(SiteSettings):
    """Settings of ``tied-ep-classifier``: the projection of the site updates and SEP's damping."""

    projection: Literal["kl", "wasserstein"] = Field(
        "kl", description="site projection: kl = EP's moment matching, wasserstein = Quantile Propagation")

    takes_priors = True  # the kernel's prior= is added to EP's energy for the hyper-parameters (a MAP fit)
    takes_mean = True  # a mean_function= shifts the latent's prior: the sites, the energy and the predictive


@dataclass(frozen=True)
class TiedEPSpec(SpecBase):
    """The tied EP/QP classifier bound to a binary classification dataset."""

    Settings = TiedEPSettings
    has_sites = True
    n_classes = 2
    parameterisation = "3"  # 3: a kernel pytree (pep_gp.core.kernels); 1: softplus lengthscales and variance

    def build(self, settings: TiedEPSettings, binding: dict) -> TiedEPClassifier:
        return TiedEPClassifier(settings.projection, jitter=settings.jitter)

    def init(self, model: TiedEPClassifier, x, settings: TiedEPSettings, seed: int) -> TiedEPParams:
        """k-means inducing inputs, the settings' kernel (default a squared exponential of unit variance, an
        unset lengthscale the median distance), ``q`` = prior, the settings' mean function (default zero)."""
        check_inducing(settings, x.shape[0])
        return model.init(x, settings.num_inducing, kernel=settings_kernel(settings), seed=seed,
                          mean=settings_mean(settings))


TIED_EP = register(TiedEPSpec("tied-ep-classifier", "classification",
                              "binary GP classification (probit), stochastic EP or Quantile Propagation with one "
                              "tied factor"))
