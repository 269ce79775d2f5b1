"""A toy model for the trainer's model-independent paths: conjugate mean estimation with an EP-style
site statistic (to test damped tied-factor updates) and an optional NaN trap (to test the rejection of
non-finite steps)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax.numpy as jnp

from pep_gp.pipeline.data.blocks import TargetScaling
from pep_gp.pipeline.models import SiteSettings, SpecBase


@dataclass(frozen=True)
class ConjugateMean:
    """``y_n ~ N(w, 1)``, ``w ~ N(0, 1)``; the energy is the log joint in ``w``. The site statistics
    ``(Σ y, Σ 1)`` drive ``post_mean`` towards the exact posterior mean ``Σy / (1 + N)``."""

    nan_above: float = math.inf  # the data term is NaN once |w| exceeds this
    fall: float = 0.0  # > 0: the site updates drift post_mean to 1 and the energy loses fall·N·post_mean² (a collapse)
    ceiling: float = math.inf  # what evidence_ceiling claims: below the energy, a fit must fail as diverged

    def step_shared(self, params, n_total):
        return ()

    def evidence_ceiling(self, params, n_total):
        return self.ceiling

    def global_energy(self, params, shared, n_total):
        return -0.5 * params["w"] ** 2 - self.fall * n_total * params["post_mean"] ** 2

    def data_energy(self, params, shared, x, y, mask):
        value = -0.5 * jnp.sum(jnp.where(mask, (y - params["w"]) ** 2, 0.0))
        return jnp.where(jnp.abs(params["w"]) > self.nan_above, jnp.nan, value)

    def site_stats(self, params, shared, x, y, mask):
        return {"sum_y": jnp.sum(jnp.where(mask, y, 0.0)), "count": jnp.sum(mask).astype(float)}

    def site_update(self, params, shared, stats, n_total, damping):
        scale = n_total / stats["count"]
        target = 1.0 if self.fall > 0 else scale * stats["sum_y"] / (1.0 + n_total)
        return {**params, "post_mean": (1 - damping) * params["post_mean"] + damping * target}, shared, True


@dataclass(frozen=True)
class ToyPredictive:
    """The predictive ``N(w, 1)`` of every row."""

    model: ConjugateMean

    def __call__(self, params, x):
        return {"mean": jnp.full(x.shape[0], params["w"]), "var": jnp.ones(x.shape[0])}


class ToySettings(SiteSettings):
    """The damped site update's settings (no model settings of its own)."""


@dataclass(frozen=True)
class ToySpec(SpecBase):
    """The spec of :class:`ConjugateMean` (registered by tests with monkeypatch)."""

    name: str = "toy"
    task: str = "regression"
    description: str = "conjugate mean (tests)"
    nan_above: float = math.inf
    fall: float = 0.0
    ceiling: float = math.inf
    Settings = ToySettings
    has_sites = True

    def check(self, data, settings, block_rows):
        pass

    def build(self, settings, binding):
        return ConjugateMean(self.nan_above, self.fall, self.ceiling)

    def init(self, model, x, settings, seed):
        return {"w": jnp.asarray(0.0), "post_mean": jnp.asarray(0.0)}

    def frozen(self, settings, params):
        return {"w": False, "post_mean": True}

    def targets(self, data, settings=None):
        return TargetScaling()

    def predictive(self, model, targets):
        return ToyPredictive(model)
