"""The class-parallel multi-class SEP step (:mod:`pep_gp.pipeline.training.class_groups`): the same bits for
every grouping of the classes in this process (on Dask workers: test_class_parallel_training.py), and the step of
:func:`~pep_gp.pipeline.training.step.training_step` to rounding."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pep_gp.core import float64
from pep_gp.core.kernels import SquaredExponential
from pep_gp.core.means import Linear
from pep_gp.core.models.multiclass import MultiClassGP
from pep_gp.core.priors import Gamma
from pep_gp.pipeline.engine import Pass
from pep_gp.pipeline.engine.cache import compiled_program, resolve
from pep_gp.pipeline.engine.in_process import InThreads
from pep_gp.pipeline.models.protocol import leaves_named
from pep_gp.pipeline.training.class_groups import ClassParallelStep, Groups
from pep_gp.pipeline.training.optimiser import adam
from pep_gp.pipeline.training.step import StepState, training_step

CLASSES, ROWS, BATCH, STEPS = 10, 120, 40, 3


class OneBlock:
    """A minibatch of one in-memory block (:class:`~pep_gp.pipeline.training.step.Minibatch`)."""

    def __init__(self, x, y, mask, scale, data_size):
        self.rows, self.scale, self.data_size = (x, y, mask), scale, data_size

    def submit(self, fn, inputs, kept=None, keep=False):
        if kept is None:
            fn, self.inputs = resolve(fn, inputs)
            result, self.kept = compiled_program(fn)(self.inputs, *self.rows)
            return Pass(result)
        x, y, mask = self.rows
        return Pass(compiled_program(fn)(inputs, self.inputs, self.kept, y, mask))


def a_problem(likelihood: str = "pairwise", classes: int = CLASSES):
    rng = np.random.default_rng(0)
    centres = 2 * rng.normal(size=(classes, 3))
    y = rng.integers(classes, size=ROWS)
    x = centres[y] + rng.normal(size=(ROWS, 3))
    model = MultiClassGP(classes, likelihood=likelihood)
    optimizer = adam(0.05, lambda params: leaves_named(params, {"factor"}))
    step = ClassParallelStep(model, optimizer, lambda t: 0.9 * 0.99**t)
    with float64():
        return step, model.init(x, 3), x, y, np.asarray(model.data_size(y))


@pytest.fixture(scope="module")
def problem():
    return a_problem()


def minibatches(x, y):
    """``STEPS`` minibatches of ``BATCH`` rows and their ``N/|B|``."""
    for s in range(STEPS):
        rows = np.arange(s * BATCH, (s + 1) * BATCH) % x.shape[0]
        with float64():
            yield s, jnp.asarray(x[rows]), y[rows], np.ones(BATCH, bool), x.shape[0] / BATCH


def trained(step, groups, x, y, class_rows):
    energies = [float(step.update(groups, s, xb, yb, mask, scale, class_rows).energy)
                for s, xb, yb, mask, scale in minibatches(x, y)]
    state = step.state(groups)
    assert {leaf.dtype for leaf in jax.tree_util.tree_leaves(state)} == {np.dtype(np.float64), np.dtype(np.int32)}
    return state, energies


@pytest.mark.exhaustive
@pytest.mark.heavy  # a default-tier test of several seconds (the README's tests stay within 5 minutes)
def test_every_grouping_gives_the_same_bits_and_the_step_of_all_classes(problem):
    """G = 1, 2 (also on two threads) and 5 groups of C = 10 classes: the same bits after a few steps; the step
    of all classes at once to rounding."""
    step, params, x, y, class_rows = problem
    one, energies = trained(step, Groups(step.init(params, 1)), x, y, class_rows)
    for n_groups, threads in ((2, False), (5, False), (2, True)):
        again, _ = trained(step, Groups(step.init(params, n_groups), partial(InThreads, threads=threads)), x, y,
                           class_rows)
        for got, want in zip(jax.tree_util.tree_leaves(again), jax.tree_util.tree_leaves(one), strict=True):
            np.testing.assert_array_equal(got, want)

    assert_the_step_of_all_classes(step, params, x, y, class_rows, one, energies)


def assert_the_step_of_all_classes(step, params, x, y, class_rows, state_of_groups, energies):
    """The class-parallel run's state and energies are those of the step of all classes, to rounding."""
    whole = training_step(step.model, step.optimizer, sites=True, damping=step.damping)
    state, expected = whole.init(params), []
    for s, xb, yb, mask, scale in minibatches(x, y):
        state, info = whole.update(StepState(state.params, state.opt_state, np.int32(s)),
                                   OneBlock(xb, jnp.asarray(yb), jnp.asarray(mask), scale, class_rows))
        expected.append(float(info.energy))
    np.testing.assert_allclose(energies, expected, rtol=1e-12)
    for got, want in zip(jax.tree_util.tree_leaves(state_of_groups),
                         jax.tree_util.tree_leaves((state.params, state.opt_state)), strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * max(float(np.max(np.abs(want))), 1e-300))


@pytest.mark.exhaustive
@pytest.mark.heavy  # compiles the per-class programs and the whole step again, for the exact likelihood
def test_the_exact_likelihood_split_by_classes_is_its_step_of_all_classes():
    """With ``likelihood="exact"`` (a row's one factor touches every class) two groups of 4 classes give the
    step of all classes, to rounding."""
    step, params, x, y, class_rows = a_problem("exact", classes=4)
    state, energies = trained(step, Groups(step.init(params, 2)), x, y, class_rows)
    assert_the_step_of_all_classes(step, params, x, y, class_rows, state, energies)


@pytest.mark.heavy  # compiles the per-class programs and the whole step again, with a mean and a prior
def test_a_mean_and_a_prior_split_by_classes_are_their_step_of_all_classes():
    """Each class's own linear mean (its slice of ``[C, D]`` weights) and its kernel's prior term, in two groups
    of 4 classes: the step of all classes, to rounding, and the means train."""
    step, _, x, y, class_rows = a_problem(classes=4)
    with float64():
        params = step.model.init(x, 3, kernel=SquaredExponential(prior={"lengthscales": Gamma(2.0, 1.0)}),
                                 mean=Linear())
    state, energies = trained(step, Groups(step.init(params, 2)), x, y, class_rows)
    assert np.all(np.asarray(state[0].mean.weights) != 0.0)
    assert_the_step_of_all_classes(step, params, x, y, class_rows, state, energies)


@pytest.mark.heavy
def test_a_step_from_the_gathered_state_in_other_groups_continues_with_the_same_bits(problem):
    """What a checkpoint holds (the state of all classes, as the step of all classes has it) starts groups
    of any size that continue the run bit for bit."""
    step, params, x, y, class_rows = problem
    straight, _ = trained(step, Groups(step.init(params, 2)), x, y, class_rows)
    groups = Groups(step.init(params, 2))
    *first, last = minibatches(x, y)
    for s, xb, yb, mask, scale in first:
        step.update(groups, s, xb, yb, mask, scale, class_rows)
    resumed = Groups(step.groups(*step.state(groups), 5))
    s, xb, yb, mask, scale = last
    step.update(resumed, s, xb, yb, mask, scale, class_rows)
    for got, want in zip(jax.tree_util.tree_leaves(step.state(resumed)), jax.tree_util.tree_leaves(straight),
                         strict=True):
        np.testing.assert_array_equal(got, want)


def test_more_groups_than_classes_is_refused(problem):
    step, params, *_ = problem
    with pytest.raises(ValueError, match="1..10"):
        step.init(params, CLASSES + 1)


@pytest.mark.heavy  # a default-tier test of several seconds (the README's tests stay within 5 minutes)
def test_a_rejected_site_update_leaves_every_class_as_it_was_as_the_step_of_all_classes_does(problem):
    """A minibatch with a non-finite row: both steps reject the site update and the ascent, and the
    parameters stay the bits they were (the class-parallel step after computing the cavities with the new
    factors first, :meth:`~pep_gp.pipeline.training.class_groups.ClassGroup.reject_sites`)."""
    step, params, x, y, class_rows = problem
    *_, (s, xb, yb, mask, scale) = minibatches(x, y)
    with float64():
        xb = xb.at[0, 0].set(jnp.nan)
    groups = Groups(step.init(params, 2))
    before = step.state(groups)
    info = step.update(groups, s, xb, yb, mask, scale, class_rows)
    whole = training_step(step.model, step.optimizer, sites=True, damping=step.damping)
    _, expected = whole.update(StepState(*whole.init(params)[:2], np.int32(s)),
                               OneBlock(xb, jnp.asarray(yb), jnp.asarray(mask), scale, class_rows))
    assert (bool(info.sites_accepted), bool(info.accepted)) == (bool(expected.sites_accepted), bool(expected.accepted))
    assert not info.sites_accepted and not info.accepted
    for got, want in zip(jax.tree_util.tree_leaves(step.state(groups)), jax.tree_util.tree_leaves(before), strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.heavy
def test_a_lost_worker_of_the_groups_is_a_clear_error_that_says_how_to_resume(problem, cluster):
    import dask
    from distributed import Client

    from pep_gp.pipeline.engine.residents import ResidentLost, Residents

    step, params, *_ = problem
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):  # a client that gives up on a worker soon
        client = Client(cluster.client.scheduler.address, security=cluster.client.security)
    groups = Groups(step.init(params, 1), partial(Residents, client))
    try:
        lost = groups.placement.workers[0]
        groups.placement.workers = ["tls://127.0.0.1:9"]  # the worker's address after it was lost
        with pytest.raises(ResidentLost, match=r"tls://127.0.0.1:9: a worker holding .* --resume"):
            step.state(groups)
    finally:
        groups.placement.workers = [lost]
        groups.release()
        client.close()
