"""The multi-class SEP step as the trainer computes it — the rows' projections computed once per block and
kept for the data term, the cavity and ``q`` from one ``LᵀΛL`` per class, the Cholesky backward that
skips what nothing differentiates — equals the plain formulation (site statistics and energy recomputed
from scratch, gradient by autodiff of ``G + (N/|B|)ΣL``) to 1e-10 in float64."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pep_gp.core import bank
from pep_gp.pipeline.engine import InProcess
from pep_gp.pipeline.models.multiclass import MultiClassSettings
from pep_gp.pipeline.training.step import RowDataTerm, RowSiteTerm, minibatch_energy
from pep_gp.pipeline.training.trainer import EngineBatch, Trainer, TrainJob
from tests.trainstores import FAST, config_for

REL = 1e-10


def _close(actual, expected):
    """Every leaf within ``REL`` of the expected leaf's largest magnitude."""
    for got, want in zip(jax.tree_util.tree_leaves(actual), jax.tree_util.tree_leaves(expected), strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=REL * max(float(np.max(np.abs(want))), 1e-300))


@pytest.mark.exhaustive
@pytest.mark.heavy
@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_the_trainers_sep_step_equals_the_plain_formulation(three_class_store, alpha, tmp_path):
    config = FAST.model_copy(update={"model": {**FAST.model, "alpha": alpha}})
    trainer = Trainer(TrainJob("multiclass-sep", three_class_store, config_for("multiclass-sep", config), None),
                      InProcess())
    state = trainer.fresh_state()
    trainer.step(state)  # a refined factor and moved hyper-parameters, away from the initial state
    parts, model, size = trainer.step_fn.parts, trainer.model, trainer.data_size
    assert isinstance(parts.site_term, RowSiteTerm) and isinstance(parts.data_term, RowDataTerm)
    blocks = trainer.schedule.blocks(1)
    batch = EngineBatch(trainer.train, blocks, trainer.n_total / trainer.train.rows(blocks), size)
    rows = [trainer.train.source.read(b) for b in blocks]
    x, y, mask = (jnp.asarray(np.concatenate([getattr(r, f) for r in rows])) for f in ("x", "y", "mask"))
    params = state.params

    # the trainer's path
    n = jnp.asarray(size, jnp.float64)
    shared, pullback = parts.prepare(params, n)
    first = batch.submit(parts.site_term, (params, shared, pullback), keep=True)
    stats = first.sum()
    refined, refreshed, ok = parts.site_update(params, shared, stats, jnp.int32(1), n)
    value, grad = batch.submit(parts.data_term, model.held(refreshed), kept=first).sum()
    energy, gradient = minibatch_energy(model, size, refined, refreshed, pullback, value, grad, batch.scale,
                                        jax.tree_util.tree_structure(shared))

    # the plain formulation on all of the minibatch's rows at once
    plain_shared = jax.jit(model.step_shared)(params, size)  # compiled once: eagerly each operation compiles apart
    plain_stats = jax.jit(model.site_stats)(params, plain_shared, x, y, mask)
    _close(stats, plain_stats)
    rho = MultiClassSettings(**config.model).damping_schedule(trainer.schedule.steps_per_epoch)(1)  # the trainer's at count 1
    plain_refined, _, plain_ok = jax.jit(model.site_update)(params, plain_shared, plain_stats, size, rho)
    assert bool(ok) and bool(plain_ok)
    _close(refined, plain_refined)
    q = bank.gaussians(refreshed.prior, refined.factor, 1.0)
    _close(refreshed.q, q)  # q from the cavity's LᵀΛL

    def plain(p):
        again = model.step_shared(p, size)
        return model.global_energy(p, again, size) + batch.scale * model.data_energy(p, again, x, y, mask)

    expected_energy, expected_gradient = jax.jit(jax.value_and_grad(plain))(refined)
    assert float(energy) == pytest.approx(float(expected_energy), rel=REL)
    _close(gradient, expected_gradient)
    assert not np.any(np.asarray(gradient.factor.precision))  # the tied factor moves by EP only
