"""``sparse-gp-ordinal``: ordinal regression, ordered labels ``0 … C − 1`` of one latent sparse GP through the
ordinal probit with learned cut points (Chu & Ghahramani 2005; :class:`pep_gp.core.ordinal.Ordinal`), with a
tied Power-EP factor (Bui, Yan & Turner 2017, :class:`pep_gp.core.models.power_ep.PowerEPSparseGP`) moved by
the gradient of the energy with everything else.

It trains on classification stores, whose labels are the classes' codes ``0 … C − 1`` in their sorted
order (an estimator's ``classes_``): that order is the ordinal scale. The predictive is every class's
probability, ``log p(y = k | x) = log(Φ(z_{k+1}) − Φ(z_k))`` (:class:`~pep_gp.pipeline.models.predictive.LikelihoodClassPredictive`),
so ``pep predict``, the held-out NLL and error and ``pep evaluate`` read it as a classifier's.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np
from pydantic import Field, field_validator

from ...core.models.power_ep import PowerEPSparseGP, SparseGPParams
from ...core.ordinal import Ordinal
from ..data.blocks import TargetScaling
from ..errors import InputError
from .predictive import LikelihoodClassPredictive
from .likelihood_parameters import LikelihoodParameterSettings
from .protocol import SpecBase, check_task, settings_kernel, settings_mean
from .registry import register
from .sparse_gp import SparseGPSettings, check_given_inducing, check_inducing


class OrdinalSettings(LikelihoodParameterSettings, SparseGPSettings):
    """Settings of the ordinal model: the sparse GP's (``alpha``, ``ard``, inducing inputs, kernel, mean
    function) and the cut points': where they start (``cut_points``; none: from the training labels' cumulative
    frequencies, :meth:`~pep_gp.core.ordinal.Ordinal.init_params`), ``fixed="cut_points"`` to keep them there to
    the bit (GPflow's ``Ordinal(bin_edges)``, whose edges are constants), and ``prior={"cut_points": …}``, a
    prior on each gap between consecutive cut points (:meth:`~pep_gp.core.ordinal.Ordinal.gaps`; a MAP fit)."""

    cut_points: tuple[float, ...] | None = Field(None, description="the starting cut points b_1 < … < b_{C−1} on "
                                                 "the latent scale, one fewer than the classes; none: from the "
                                                 "training labels' cumulative frequencies")

    leaf_forwards = MappingProxyType({"raw_cut_points": Ordinal.gaps})  # a prior on each gap

    def likelihood_name(self) -> str:
        return "ordinal"

    @field_validator("cut_points")
    @classmethod
    def _increasing(cls, value: tuple[float, ...] | None) -> tuple[float, ...] | None:
        if value is not None and not (len(value) >= 1 and np.all(np.isfinite(value)) and np.all(np.diff(value) > 0)):
            raise ValueError(f"cut points must be finite and strictly increasing, at least one; got {list(value)}")
        return value


@dataclass(frozen=True)
class OrdinalSpec(SpecBase):
    """The ordinal sparse GP bound to a classification dataset of any number of (ordered) classes."""

    Settings = OrdinalSettings
    parameterisation = "1"

    def check(self, data: Any, settings: OrdinalSettings, block_rows: int) -> None:
        """A classification dataset, ``inducing_points`` (when given) that fit it
        (:func:`~pep_gp.pipeline.models.sparse_gp.check_given_inducing`) and one cut point fewer than its classes."""
        check_task(self, data)
        check_given_inducing(data, settings)
        if settings.cut_points is not None and len(settings.cut_points) != data.n_classes - 1:
            raise InputError(f"cut_points: {data.n_classes} classes need {data.n_classes - 1} cut points; got "
                             f"{len(settings.cut_points)}")

    def binding(self, data: Any) -> dict[str, Any]:
        return {"n_classes": int(data.n_classes)}

    def build(self, settings: OrdinalSettings, binding: dict[str, Any]) -> PowerEPSparseGP:
        return PowerEPSparseGP(Ordinal(binding["n_classes"]), alpha=settings.alpha, jitter=settings.jitter,
                               priors=settings.leaf_priors())

    def init(self, model: PowerEPSparseGP, x, settings: OrdinalSettings, seed: int) -> SparseGPParams:
        """As the sparse GP's (:meth:`~pep_gp.pipeline.models.sparse_gp.SparseGPSpec.init`), with equally
        frequent classes' cut points until :meth:`settle` sees the labels."""
        if settings.inducing_points is None:
            check_inducing(settings, x.shape[0])
        return model.init(x, settings.num_inducing, inducing=settings.inducing_points, kernel=settings_kernel(settings),
                          seed=seed, ard=settings.ard, mean=settings_mean(settings))

    def settle(self, model: PowerEPSparseGP, params: SparseGPParams, x, y, settings: OrdinalSettings,
               n_total) -> SparseGPParams:
        """The cut points started at ``cut_points``, or from the cumulative frequencies of the labels ``y`` of the
        starting sample (:meth:`~pep_gp.core.ordinal.Ordinal.init_params`)."""
        if settings.cut_points is not None:
            return params._replace(likelihood=model.likelihood.params_of(settings.cut_points))
        counts = np.bincount(np.asarray(y, dtype=np.int64), minlength=model.likelihood.n_classes)
        return params._replace(likelihood=model.likelihood.init_params(counts))

    def predictive(self, model: PowerEPSparseGP, targets: TargetScaling):
        return LikelihoodClassPredictive(model)


ORDINAL = register(OrdinalSpec("sparse-gp-ordinal", "classification",
                               "ordinal regression: ordered classes of one sparse GP through a probit with learned "
                               "cut points (Chu & Ghahramani 2005), tied Power-EP factor"))
