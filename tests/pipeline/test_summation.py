"""The engine's summation tree cut into subtrees (what each worker sums), the results that are zero by
construction, the two-pass sums that keep each block's rows where they were computed, and the guarded
ascent step."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pep_gp.pipeline.engine import InProcess
from pep_gp.pipeline.engine.summation import (Zero, inflate, join_subtrees, structural_zeros, subtrees, tree_sum,
                                             without_zeros)
from pep_gp.pipeline.engine.cache import Derived
from pep_gp.pipeline.training.step import DataTerm, Prepare, RowDataTerm, RowSiteTerm, WithShared, ascent_update
from pep_gp.pipeline.training.trainer import Trainer, TrainJob
from tests.trainstores import config_for


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.integers(1, 9), st.integers(0, 2**31 - 1))
def test_sums_of_subtrees_are_bit_identical_to_the_whole_tree(count, workers, seed):
    """Any number of workers: the ranges are consecutive whole subtrees covering every part once, and
    joining their sums gives exactly the bits of the one tree over all parts."""
    parts = list(np.random.default_rng(seed).normal(size=(count, 3)) * 10.0 ** np.arange(-8, 9, 8))
    ranges = subtrees(count, workers)
    assert len(ranges) == min(count, workers) and [i for r in ranges for i in r] == list(range(count))
    partial = {span: tree_sum([parts[i] for i in span]) for span in ranges}
    assert join_subtrees(count, partial).tobytes() == tree_sum(parts).tobytes()


def test_tree_sum_and_zeros():
    assert tree_sum([1.0, 2.0, 4.0]) == 1.0 + (2.0 + 4.0)
    zero = Zero((2, 3), "float64")
    assert tree_sum([zero, zero]) == zero
    summed = tree_sum([{"a": zero, "b": np.ones(2)}, {"a": zero, "b": np.ones(2)}])
    assert summed["a"] == zero and inflate(summed)["a"].tobytes() == np.zeros((2, 3)).tobytes()
    assert without_zeros({"a": np.ones(2), "b": jnp.zeros(3)}, [False, True])["b"] == Zero((3,), "float64")


def test_structural_zeros_are_the_gradients_of_what_is_not_differentiated():
    def fn(a, b, c):
        return jax.value_and_grad(lambda a, b, c: jnp.sum(a * jax.lax.stop_gradient(b)) + 0.0 * jnp.sum(c),
                                  argnums=(0, 1, 2))(a, b, c)

    args = (jnp.ones(3), jnp.ones(3), jnp.ones(2))
    zeros = structural_zeros(jax.jit(fn).trace(*args).jaxpr)
    assert zeros == [False, False, True, False]  # value, ∂a, ∂b (held: zero), ∂c (0·c: zero only in value)

    def two_paths(a, b):  # ∂b is the sum of two held paths' zeros; ∂a of a zero and a live one
        grads = [jax.grad(lambda a, b: jnp.sum(a * jax.lax.stop_gradient(b)), argnums=(0, 1))(a, b) for _ in range(2)]
        return jax.tree_util.tree_map(jnp.add, *grads)

    assert structural_zeros(jax.jit(two_paths).trace(*args[:2]).jaxpr) == [False, True]


@pytest.mark.heavy
def test_the_two_passes_keep_the_rows_and_equal_the_plain_block_terms(three_class_store):
    """The first pass keeps each block's rows in this process (and the step's pullback once, not per
    block); the second, from them, gives the data term's value and gradient of DataTerm to rounding (each
    block pulls its ∂L/∂S back to θ itself); without the kept rows (another process) they are computed
    again, with the same bits."""
    backend = InProcess()
    trainer = Trainer(TrainJob("multiclass-sep", three_class_store, config_for("multiclass-sep"), None), backend)
    params, model = trainer.fresh_state().params, trainer.model
    n_total = jnp.asarray(trainer.data_size, jnp.float64)
    shared, pullback = jax.jit(Prepare(model))(params, n_total)
    engine, blocks = trainer.train, [0, 3, 5]
    first = engine.submit(Derived(RowSiteTerm(model), WithShared(Prepare(model), pullback=True)), (params, n_total),
                          blocks, keep=True)
    assert sorted(backend.kept.parts) == blocks
    step_sized = {np.shape(leaf) for leaf in jax.tree_util.tree_leaves(pullback)
                  if np.ndim(leaf) == 3 and np.shape(leaf)[1] == np.shape(leaf)[2]}
    for part in backend.kept.parts.values():  # the step's pullback is held once per process, not in each part
        assert sum(np.shape(leaf) in step_sized for leaf in jax.tree_util.tree_leaves(part)) <= 2  # was 10
    two_pass = engine.submit(RowDataTerm(model), model.held(shared), first).sum()
    value, (grad_params, grad_shared) = engine.map_sum(DataTerm(model), (params, shared), blocks)
    (through_shared,) = pullback(grad_shared)  # the blocks pull back their own part: equal up to rounding
    plain = value, (jax.tree_util.tree_map(jnp.add, grad_params, through_shared), None)
    backend.kept.start("another pass", *backend.kept.first)  # nothing held: the parts are computed again
    again = engine.submit(RowDataTerm(model), model.held(shared), first).sum()
    for a, b, c in zip(jax.tree_util.tree_leaves(two_pass), jax.tree_util.tree_leaves(plain),
                       jax.tree_util.tree_leaves(again), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14 * float(np.max(np.abs(b))))
        assert np.asarray(a).tobytes() == np.asarray(c).tobytes()
    with pytest.raises(ValueError, match="keep=True"):
        engine.submit(RowDataTerm(model), model.held(shared), engine.submit(DataTerm(model), (params, shared), blocks))


@pytest.mark.heavy
def test_a_rejected_ascent_changes_nothing_and_an_accepted_one_is_adams():
    params = {"w": jnp.asarray([1.0, -2.0]), "v": jnp.asarray(3.0)}
    optimizer = optax.adam(0.1)
    state = optimizer.init(params)
    grad = {"w": jnp.asarray([0.5, 0.25]), "v": jnp.asarray(-1.0)}
    new, new_state, ok = jax.jit(ascent_update, static_argnums=0)(optimizer, params, state, 1.5, grad)
    updates, expected_state = optimizer.update(jax.tree_util.tree_map(jnp.negative, grad), state, params)
    assert bool(ok)
    for a, b in zip(jax.tree_util.tree_leaves((new, new_state)),
                    jax.tree_util.tree_leaves((optax.apply_updates(params, updates), expected_state))):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
    for value, bad in ((np.nan, grad), (1.5, {**grad, "v": jnp.asarray(np.inf)})):
        kept, kept_state, ok = ascent_update(optimizer, new, new_state, value, bad)
        assert not bool(ok)
        for a, b in zip(jax.tree_util.tree_leaves((kept, kept_state)), jax.tree_util.tree_leaves((new, new_state))):
            assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
