"""``tied-ep-classifier``: binary probit GP classification whose tied factor moves by stochastic EP
(``projection = "kl"``) or stochastic Quantile Propagation (``"wasserstein"``, seed002) site updates
(:class:`pep_gp.core.models.tied_ep.TiedEPClassifier`), minibatched and distributed like every model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal

from pydantic import Field

from ...core.bank import NaturalFactor
from ...core.models.tied_ep import TiedEPClassifier, TiedEPParams
from ..data.blocks import TargetScaling
from .protocol import SiteSettings
from .registry import register
from .sparse_gp import ProbitHeldOut, check_inducing, check_task, fixed_inducing


class TiedEPSettings(SiteSettings):
    """Settings of ``tied-ep-classifier``: the projection of the site updates and SEP's damping."""

    projection: Literal["kl", "wasserstein"] = Field(
        "kl", description="site projection: kl = EP's moment matching, wasserstein = Quantile Propagation (seed002)")


@dataclass(frozen=True)
class TiedEPSpec:
    """The tied EP/QP classifier bound to a binary classification dataset (the :class:`~pep_gp.pipeline.models.ModelSpec` protocol)."""

    name: str = "tied-ep-classifier"
    description: str = ("binary GP classification (probit), stochastic EP or Quantile Propagation with one tied "
                        "factor (seed001 §2.3, seed002)")
    task = "classification"
    Settings = TiedEPSettings
    has_sites = True

    def check(self, data: Any, settings: TiedEPSettings, block_rows: int) -> None:
        check_task(self, data, 2)

    def binding(self, data: Any) -> dict[str, Any]:
        return {}

    def build(self, settings: TiedEPSettings, binding: dict[str, Any]) -> TiedEPClassifier:
        return TiedEPClassifier(settings.projection, jitter=settings.jitter)

    def init(self, model: TiedEPClassifier, x, settings: TiedEPSettings, seed: int) -> TiedEPParams:
        """k-means inducing inputs, median-distance lengthscales, unit kernel variance, ``q`` = prior."""
        check_inducing(settings, x.shape[0])
        return model.init(x, settings.num_inducing, seed=seed)

    def frozen(self, settings: TiedEPSettings, params: TiedEPParams) -> TiedEPParams:
        """The factor moves only by site updates; the inducing inputs unless ``train_inducing``."""
        return fixed_inducing(params, settings)._replace(factor=NaturalFactor(True, True))

    def targets(self, data: Any) -> TargetScaling:
        return TargetScaling()

    def held_out(self, model: TiedEPClassifier, targets: TargetScaling) -> Callable:
        return ProbitHeldOut(model)


TIED_EP = register(TiedEPSpec())
