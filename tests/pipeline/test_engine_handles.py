"""The engine's handles (issue 64 item 3): a keeping pass is a handle given to the second pass, which sums
from what each block kept, against numpy on the same rows; a second pass needs a pass that kept something; a
released pass's kept parts are gone, in this process and on Dask workers."""

from __future__ import annotations

import time

import jax.numpy as jnp
import numpy as np
import pytest

from pep_gp.core import float64
from pep_gp.pipeline.data.blocks import BlockSource, TargetScaling
from pep_gp.pipeline.engine import Engine, InProcess, Pass


def projected(weights, x, y, mask):
    """First pass: ``Σ y·mask``, keeping the block's projections ``x @ weights``."""
    return jnp.sum(y * mask), x @ weights


def kept_term(scale, shared, kept, y, mask):
    """Second pass, from the kept projections: ``Σ scale·sin(x @ weights)·mask`` and the first pass's inputs."""
    return jnp.sum(scale * jnp.sin(kept) * mask), shared


def test_a_second_pass_sums_from_the_first_passs_kept_rows(binary_store):
    source = BlockSource.of(binary_store, "train", 48, TargetScaling())
    blocks, weights = [0, 3, 8], np.array([0.3, -1.2, 0.7])
    engine = Engine(InProcess(), source)
    with float64():
        first = engine.submit(projected, weights, blocks, keep=True)
        second = engine.submit(kept_term, 2.0, first)
        again = engine.submit(kept_term, 2.0, first)
    assert isinstance(first, Pass) and isinstance(second, Pass)
    read = [source.read(b) for b in blocks]
    x, y, mask = (np.concatenate([getattr(block, name) for block in read]) for name in ("x", "y", "mask"))
    np.testing.assert_allclose(first.sum(), np.sum(y * mask), rtol=1e-12)
    value, shared = second.sum()
    np.testing.assert_allclose(value, np.sum(2.0 * np.sin(x @ weights) * mask), rtol=1e-12)
    np.testing.assert_array_equal(shared, len(blocks) * weights)  # the first pass's inputs, once per block
    assert all(np.asarray(a).tobytes() == np.asarray(b).tobytes() for a, b in zip(again.sum(), second.sum()))


def test_a_second_pass_needs_a_pass_that_kept_its_rows(binary_store):
    engine = Engine(InProcess(), BlockSource.of(binary_store, "train", 48, TargetScaling()))
    with float64():
        plain = engine.submit(lambda weights, x, y, mask: jnp.sum(x @ weights), np.ones(3), [0, 1])
        kept = engine.submit(projected, np.ones(3), [0, 1], keep=True)
        with pytest.raises(ValueError, match="keep=True"):
            engine.submit(kept_term, 1.0, plain)
        with pytest.raises(ValueError, match="keeps nothing"):
            engine.submit(kept_term, 1.0, kept, keep=True)


def _kept_parts(dask_worker) -> tuple[str | None, list[int]]:
    """The token and blocks of what the pep engine on ``dask_worker`` keeps (run there by ``client.run``)."""
    kept = dask_worker.plugins["pep-worker-engine"].kept
    return kept.token, sorted(kept.parts)


def test_a_released_pass_lets_its_kept_parts_go_and_runs_no_second_pass(binary_store):
    source = BlockSource.of(binary_store, "train", 48, TargetScaling())
    backend = InProcess()
    engine = Engine(backend, source)
    with float64():
        first = engine.submit(projected, np.ones(3), [0, 2], keep=True)
        assert sorted(backend.kept.parts) == [0, 2]
        later = engine.submit(projected, np.ones(3), [1], keep=True)  # replaces the first pass's parts
        first.release()  # no longer held here: the later pass's stay
        assert sorted(backend.kept.parts) == [1] and backend.kept.first is not None
        later.release()
        later.release()  # a second time: nothing to do
        assert backend.kept.parts == {} and backend.kept.first is None and later.released
        with pytest.raises(ValueError, match="before it is released"):
            engine.submit(kept_term, 1.0, later)
        plain = engine.submit(lambda weights, x, y, mask: jnp.sum(x @ weights), np.ones(3), [0])
        plain.release()  # kept nothing: nothing to let go
        assert plain.released


@pytest.mark.heavy  # a cluster's start, seconds
def test_a_released_pass_lets_its_kept_parts_go_on_the_workers(binary_store, cluster):
    """Dask's ``Future.release`` is the model: the workers that computed a keeping pass drop what it kept."""
    engine = Engine(cluster, BlockSource.of(binary_store, "train", 48, TargetScaling()))
    with float64():
        first = engine.submit(projected, np.ones(3), [0, 1, 2, 3], keep=True)
    held = cluster.client.run(_kept_parts)
    token = first.keeping.token
    assert sorted(block for _, blocks in held.values() for block in blocks) == [0, 1, 2, 3]
    assert {kept_token for kept_token, _ in held.values()} == {token}
    first.release()
    deadline = time.monotonic() + 30
    while any(blocks for _, blocks in cluster.client.run(_kept_parts).values()):
        assert time.monotonic() < deadline, "the workers still hold the released pass's parts"
        time.sleep(0.05)
    assert {kept_token for kept_token, _ in cluster.client.run(_kept_parts).values()} == {None}
