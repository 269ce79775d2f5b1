"""A toy model for the coordinator's model-independent paths: conjugate mean estimation with an
EP-style site statistic (to test damped tied-factor updates) and an optional NaN trap (to test the
rejection of non-finite steps)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax.numpy as jnp

from pipeline.blocks import TargetScaling
from pipeline.metrics import regression_sums


@dataclass(frozen=True)
class ConjugateMean:
    """``y_n ~ N(w, 1)``, ``w ~ N(0, 1)``; the energy is the log joint in ``w``. The site statistics
    ``(Σ y, Σ 1)`` drive ``post_mean`` towards the exact posterior mean ``Σy / (1 + N)``."""

    nan_above: float = math.inf  # the data term is NaN once |w| exceeds this

    def global_energy(self, params, n_total):
        return -0.5 * params["w"] ** 2

    def local_energy(self, params, x, y, mask, n_total):
        value = -0.5 * jnp.sum(jnp.where(mask, (y - params["w"]) ** 2, 0.0))
        return jnp.where(jnp.abs(params["w"]) > self.nan_above, jnp.nan, value)

    def local_site_stats(self, params, x, y, mask, n_total):
        return {"sum_y": jnp.sum(jnp.where(mask, y, 0.0)), "count": jnp.sum(mask).astype(float)}

    def site_update(self, params, stats, scale, damping):
        target = scale * stats["sum_y"] / (1.0 + scale * stats["count"])
        return {**params, "post_mean": (1 - damping) * params["post_mean"] + damping * target}


@dataclass(frozen=True)
class HeldOut:
    model: ConjugateMean

    def __call__(self, params, x, y, mask):
        mean = jnp.full(y.shape, params["w"])
        return regression_sums(mean, jnp.ones_like(y), y, mask)


@dataclass(frozen=True)
class ToySpec:
    """The ModelSpec protocol for :class:`ConjugateMean` (registered by tests with monkeypatch)."""

    name: str = "toy"
    task: str = "regression"
    nan_above: float = math.inf

    def check(self, store):
        pass

    def store_binding(self, store):
        return {}

    def bind(self, binding):
        return self

    def targets(self, store):
        return TargetScaling()

    def model(self, config):
        return ConjugateMean(self.nan_above)

    def init(self, model, x, config):
        return {"w": jnp.asarray(0.0), "post_mean": jnp.asarray(0.0)}

    def held_out(self, model, targets):
        return HeldOut(model)

    def frozen(self, config):
        return lambda params: {"w": False, "post_mean": True}
