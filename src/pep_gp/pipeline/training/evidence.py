"""What a trainer measures of its parameters besides the step: the energy of all training rows (whose
standardised form gives a fit's log marginal likelihood, :meth:`~pep_gp.pipeline.training.trainer.Trainer.
log_marginal_likelihood`) and the held-out metrics of the test split, each one pass over the blocks on the
engine."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import jax
import numpy as np

from ...core import float64
from ...core.parameters import on_device
from ..engine import Engine
from ..engine.cache import Derived, derived
from ..metrics import finish
from .step import Prepare, StepParts, WithShared


def energy(model: Any, parts: StepParts, engine: Engine, params: Any, data_size: Any, scale: float) -> float:
    """The energy ``F = G + Σ_blocks L`` of every block of ``engine`` at ``params``, the data term scaled by
    ``scale`` (the rows represented over the rows, when those are more, as a minibatch's is). It runs the
    step's compiled programs (``parts``) where it can (the step-shared quantities; the data term of a model
    without site updates), so that a fit's evidence compiles the global term only (and, with site updates,
    the data term's value): each program is seconds of compiling on a CPU, again for every number of
    features."""
    with float64():
        size = on_device(np.float64(data_size))
        prepare, blocks = Prepare(model), range(engine.source.n_blocks)
        shared, _ = derived(prepare, (params, size))  # the step's own compiled program
        if parts.site_term is None:  # the step's data term too (its gradient unused): no compiling
            data, _ = engine.map_sum(Derived(parts.data_term, WithShared(prepare)), (params, size), blocks)
        else:  # the step's data term reads the site-updated quantities
            data = engine.map_sum(DataValue(model), (params, shared), blocks)
        return float(_global_energy(model, params, shared, size)) + float(data) * scale  # on the host: no program


def held_out_metrics(engine: Engine | None, held_out: Any, params: Any) -> dict[str, Any]:
    """The metrics of ``params`` on every block of ``engine`` (the test split; empty without one)."""
    if engine is None:
        return {}
    return finish(engine.map_sum(held_out, params, range(engine.source.n_blocks)))


@dataclass(frozen=True)
class DataValue:
    """The data term ``L`` of one block (no gradient); input ``(params, shared)``."""

    __name__ = "data_value"  # the compiled program's name (in logs and the compile notice)
    model: Any

    def __call__(self, inputs, x, y, mask):
        params, shared = inputs
        return self.model.data_energy(params, shared, x, y, mask)


@partial(jax.jit, static_argnums=0)
def _global_energy(model, params, shared, size):
    return model.global_energy(params, shared, size)
