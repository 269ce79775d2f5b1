"""The seeded, memory-bounded shuffle of ingest's row stream."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pep_gp.pipeline.data.ingest import ingest
from pep_gp.pipeline.data.shuffle import ShuffleBuffer
from pep_gp.pipeline.data.sources import SourceRequest, open_source
from pep_gp.pipeline.data.stores import open_store


def _run(blocks, capacity, seed):
    buffer, out, held = ShuffleBuffer(capacity, seed), [np.empty((0, 2), dtype=int)], []
    for block in blocks:
        out += list(buffer.push(np.column_stack([block, -block])))
        held.append(buffer.size)
    out += list(buffer.drain())
    rows = np.concatenate(out)
    return rows[:, 0], rows[:, 1], held


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 40), max_size=12), st.integers(1, 30), st.integers(0, 2**32 - 1))
def test_output_is_an_aligned_permutation_within_the_memory_bound(sizes, capacity, seed):
    starts = np.cumsum([0] + sizes)
    blocks = [np.arange(a, b) for a, b in zip(starts[:-1], starts[1:])]
    values, negated, held = _run(blocks, capacity, seed)
    np.testing.assert_array_equal(np.sort(values), np.arange(starts[-1]))
    np.testing.assert_array_equal(negated, -values)  # columns stay aligned
    assert all(h < 2 * capacity for h in held)


def test_deterministic_by_seed():
    blocks = [np.arange(i, i + 10) for i in range(0, 100, 10)]
    first, second, other = (_run(blocks, 16, s)[0] for s in (5, 5, 6))
    np.testing.assert_array_equal(first, second)
    assert not np.array_equal(first, other)


def test_input_within_capacity_is_fully_mixed_and_longer_input_is_mixed_locally():
    blocks = [np.arange(i, i + 100) for i in range(0, 10_000, 100)]
    full, _, _ = _run(blocks, 20_000, 0)
    assert abs(np.corrcoef(full, np.arange(full.size))[0, 1]) < 0.05
    local, _, _ = _run(blocks, 500, 0)
    displacement = np.abs(local - np.arange(local.size))
    assert np.median(displacement) > 100           # rows do move ...
    assert np.corrcoef(local, np.arange(local.size))[0, 1] > 0.9   # ... within windows of ~capacity


def test_rejects_empty_capacity():
    with pytest.raises(ValueError, match="capacity must be a positive"):
        ShuffleBuffer(0, seed=1)


@pytest.mark.heavy
def test_date_sorted_airline_rows_are_spread_over_every_chunk(tmp_path):
    """The bundled flights are sorted by date; after ingest every chunk spans (almost) the whole year."""
    ingest(open_source("airline", SourceRequest((), "delayed")), tmp_path / "a.zarr", seed=0)
    store = open_store(tmp_path / "a.zarr")
    month = store.feature_names.index(next(f for f in store.feature_names if "month" in f.lower() and "day" not in f.lower()))
    for index in (0, store.n_chunks("train") // 2, store.n_chunks("train") - 1):
        months = np.unique(store.read_chunk("train", index)[0][:, month])
        assert months.size == 12, (index, months)
