"""Priors on positive hyper-parameters: training maximises ``F(θ) + log p(θ)``, a MAP estimate (Rasmussen &
Williams 2006, §5.2 and §5.4.1; the sum over rows stays the energy's own, so the prior counts once per step,
not per minibatch row).

Convention (GPflow's ``prior_on="constrained"``): a prior is a density of the *constrained* value ``θ`` (a
lengthscale, a noise variance), and since the optimiser moves the stored, unconstrained ``r`` with
``θ = g(r)``, the term added is the density of ``r``,

    log p(r) = log p_θ(g(r)) + log |g'(r)|,

``log |g'(r)| = r`` for the logarithm a kernel stores (:data:`~pep_gp.core.parameters.LOG`) and ``log σ(r)`` for
the softplus of the likelihoods' parameters. The MAP estimate is then the mode of the posterior of the
parameters the optimiser moves (the mode of ``p(θ|y)`` itself differs by that Jacobian).

Distributions (each a small immutable value; :meth:`to_dict` is its JSON, :func:`prior_from_dict` its inverse):

* :class:`LogNormal` ``log θ ~ N(mean, sigma²)``;
* :class:`Gamma` ``θ ~ Gamma(shape, rate)``, density ``∝ θ^(shape−1) e^(−rate·θ)``;
* :class:`HalfNormal` ``θ ~ |N(0, scale²)|``.

Example:
    >>> round(float(LogNormal(0.0, 1.0).log_prob(1.0)), 4)  # −½ log 2π
    -0.9189
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from .gaussian import LOG_2PI


def _positive_numbers(prior: Any) -> None:
    """Check a prior's numbers (each finite; all but a mean positive) and store them as floats."""
    for item in fields(prior):
        value = getattr(prior, item.name)
        if not (np.isfinite(value) and (item.name == "mean" or value > 0)):
            wanted = "finite" if item.name == "mean" else "positive and finite"
            raise ValueError(f"{prior.name} prior: {item.name} must be {wanted}; got {value!r}")
        object.__setattr__(prior, item.name, float(value))


@dataclass(frozen=True)
class LogNormal:
    """``log θ ~ N(mean, sigma²)``:
    ``log p(θ) = −½((log θ − mean)/sigma)² − log sigma − ½log 2π − log θ``."""

    mean: float = 0.0
    sigma: float = 1.0
    name: ClassVar[str] = "log-normal"

    def __post_init__(self):
        _positive_numbers(self)

    def log_prob(self, value):
        log_value = jnp.log(value)
        return -0.5 * ((log_value - self.mean) / self.sigma) ** 2 - np.log(self.sigma) - 0.5 * LOG_2PI - log_value


@dataclass(frozen=True)
class Gamma:
    """``θ ~ Gamma(shape, rate)``:
    ``log p(θ) = shape·log rate − log Γ(shape) + (shape − 1) log θ − rate·θ``."""

    shape: float = 2.0
    rate: float = 1.0
    name: ClassVar[str] = "gamma"

    def __post_init__(self):
        _positive_numbers(self)

    def log_prob(self, value):
        return (self.shape * np.log(self.rate) - gammaln(self.shape) + (self.shape - 1.0) * jnp.log(value)
                - self.rate * value)


@dataclass(frozen=True)
class HalfNormal:
    """``θ ~ |N(0, scale²)|``: ``log p(θ) = ½log(2/π) − log scale − ½(θ/scale)²``."""

    scale: float = 1.0
    name: ClassVar[str] = "half-normal"

    def __post_init__(self):
        _positive_numbers(self)

    def log_prob(self, value):
        return 0.5 * np.log(2.0 / np.pi) - np.log(self.scale) - 0.5 * (value / self.scale) ** 2


PRIORS: dict[str, type] = {cls.name: cls for cls in (LogNormal, Gamma, HalfNormal)}
"""The prior distributions by name: what a ``prior`` table's ``name`` says."""


def prior_to_dict(prior: Any) -> dict[str, Any]:
    """A prior's JSON description: its name and its numbers."""
    return {"name": prior.name, **asdict(prior)}


def prior_from_dict(description: Any) -> Any:
    """The prior of a :func:`prior_to_dict` description, or ``description`` itself when it is one (ValueError
    naming an unknown distribution or field, with the choices)."""
    if isinstance(description, tuple(PRIORS.values())):
        return description
    if not isinstance(description, dict) or "name" not in description:
        raise ValueError(f"a prior is a table with a 'name' (one of {', '.join(PRIORS)}); got {description!r}")
    values = dict(description)
    name = str(values.pop("name")).lower()
    if name not in PRIORS:
        raise ValueError(f"unknown prior {name!r}; expected one of {', '.join(PRIORS)}")
    cls = PRIORS[name]
    unknown = sorted(set(values) - {item.name for item in fields(cls)})
    if unknown:
        raise ValueError(f"{name} prior: unknown fields {unknown}; it takes {[item.name for item in fields(cls)]}")
    return cls(**values)


def log_density(prior: Any, forward, raw):
    """``Σ log p_θ(g(r)) + log |g'(r)|`` over the entries of the stored ``raw`` (the module's convention), ``g``
    the elementwise bijection ``forward``."""
    value, slope = jax.jvp(forward, (raw,), (jnp.ones_like(raw),))
    return jnp.sum(prior.log_prob(value) + jnp.log(jnp.abs(slope)))
