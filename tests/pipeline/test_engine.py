"""The engine in-process: block reading and padding, the bounded block cache, fixed-order sums,
minibatch schedules."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pep_gp.core import float64
from pep_gp.pipeline.engine import cache as engine_cache
from pep_gp.pipeline.data.blocks import Block, BlockSource, TargetScaling
from pep_gp.pipeline.engine.cache import BlockCache, block_bytes
from pep_gp.pipeline.engine import Engine, InProcess, connect, tree_sum
from pep_gp.pipeline.errors import InputError
from pep_gp.pipeline.models import MODELS
from pep_gp.pipeline.training.step import DataTerm
from pep_gp.pipeline.training.sampling import MinibatchSchedule, key_data
from tests.trainstores import FAST


def test_blocks_are_standardised_padded_and_masked(binary_store):
    source = BlockSource.of(binary_store, "train", 48, TargetScaling())
    assert (source.n_blocks, source.rows_in(8)) == (9, 16)
    x_all, y_all = (a[:] for a in binary_store.arrays("train"))
    last = source.read(8)
    assert last.x.shape == (48, 3) and last.mask.sum() == 16 and not last.x[16:].any()
    expected = (x_all[384:].astype(float) - binary_store.attrs["x_mean"]) / binary_store.attrs["x_std"]
    np.testing.assert_array_equal(last.x[:16], expected)
    raw = BlockSource.of(binary_store, "train", 48, TargetScaling(), standardize=False).read(8)
    np.testing.assert_array_equal(raw.x[:16], x_all[384:].astype(float))
    np.testing.assert_array_equal(last.y[:16], y_all[384:])
    with pytest.raises(IndexError):
        source.read(9)


@pytest.mark.heavy
def test_map_sum_equals_the_full_data_term(binary_store):
    spec = MODELS["sparse-gp-classifier"]
    settings = spec.Settings(**FAST.model)
    model = spec.build(settings, {})
    source = BlockSource.of(binary_store, "train", 48, TargetScaling())
    x = np.concatenate([source.read(b).x[source.read(b).mask] for b in range(9)])
    y = np.concatenate([source.read(b).y[source.read(b).mask] for b in range(9)])
    params = spec.init(model, x, settings, 0)
    shared = jax.jit(model.step_shared)(params, 400)
    value, (grad, shared_grad) = Engine(InProcess(), source).map_sum(DataTerm(model), (params, shared), range(9))
    direct_value, (direct_grad, direct_shared_grad) = jax.jit(jax.value_and_grad(model.data_energy, argnums=(0, 1)))(
        params, shared, x, y, np.ones(400, bool))
    for a, b in zip(jax.tree_util.tree_leaves(shared_grad), jax.tree_util.tree_leaves(direct_shared_grad)):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(value, direct_value, rtol=1e-12)
    for a, b in zip(jax.tree_util.tree_leaves(grad), jax.tree_util.tree_leaves(direct_grad)):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


def block_sums(params, x, y, mask):
    """A per-block function that depends on every value of the block (so a wrong block changes it)."""
    return {"x": jnp.sum(jnp.sin(x @ params) * mask), "y": jnp.sum(y * mask)}


class RecordingCache(BlockCache):
    """A block cache that records the bytes it holds after every block it serves."""

    def __init__(self):
        super().__init__()
        self.held: list[int] = []

    def get(self, source, index):
        block = super().get(source, index)
        self.held.append(self.nbytes)
        return block


def test_a_bounded_block_cache_keeps_its_budget_and_the_sums(binary_store, monkeypatch):
    source = BlockSource.of(binary_store, "train", 48, TargetScaling())
    size = block_bytes(source.read(0))
    order = [0, 1, 2, 0, 3, 4, 5, 6, 7, 8, 8, 1, 0, 5]  # revisits blocks after they were evicted
    params = np.array([0.3, -1.2, 0.7])
    sums = []
    for megabytes in (1000.0, 2.5 * size / 2**20):  # unbounded, then room for two blocks
        monkeypatch.setenv("PEP_BLOCK_CACHE_MB", str(megabytes))
        cache = RecordingCache()
        monkeypatch.setattr(engine_cache, "BLOCKS", cache)
        sums.append(Engine(InProcess(), source).map_sum(block_sums, params, order))
    assert max(cache.held) <= 2.5 * size and len(cache) == 2
    assert sums[1] == sums[0]  # bit for bit: evicted blocks are read again, unchanged


def test_the_block_cache_evicts_the_least_recently_used_block(binary_store):
    source = BlockSource.of(binary_store, "train", 48, TargetScaling())
    cache = BlockCache(lambda: 2 * block_bytes(source.read(0)))
    first = cache.get(source, 0)
    cache.get(source, 1)
    assert cache.get(source, 0) is first  # a hit, and 0 is now the most recent
    cache.get(source, 2)
    assert (source, 0) in cache and (source, 1) not in cache and (source, 2) in cache
    assert cache.nbytes == 2 * block_bytes(first) and len(cache) == 2
    cache.get(source, 1)
    assert (source, 0) not in cache and (source, 1) in cache


def test_a_zero_budget_caches_nothing(binary_store, monkeypatch):
    monkeypatch.setenv("PEP_BLOCK_CACHE_MB", "1")
    source = BlockSource.of(binary_store, "train", 48, TargetScaling())
    cache = BlockCache()
    first = cache.get(source, 3)
    assert len(cache) == 1
    monkeypatch.setenv("PEP_BLOCK_CACHE_MB", "0")
    again, third = cache.get(source, 3), cache.get(source, 3)
    assert again is not first and third is not again and (len(cache), cache.nbytes) == (0, 0)
    np.testing.assert_array_equal(again.x, first.x)


@pytest.mark.parametrize("value", ["-1", "lots", "nan", "inf"])
def test_a_bad_block_cache_budget_is_refused(binary_store, monkeypatch, value):
    monkeypatch.setenv("PEP_BLOCK_CACHE_MB", value)
    source = BlockSource.of(binary_store, "train", 48, TargetScaling())
    with pytest.raises(InputError, match="PEP_BLOCK_CACHE_MB: expected a finite number of megabytes >= 0"):
        BlockCache().get(source, 0)


class Device:
    """What default_budget reads of a JAX device (the test machines have no GPU)."""

    def __init__(self, platform, stats):
        self.platform, self.stats = platform, stats

    def memory_stats(self):
        return self.stats


def test_the_default_block_cache_budget_follows_a_gpus_free_memory(monkeypatch):
    gpu = Device("gpu", {"bytes_limit": 80 * 2**30, "bytes_in_use": 2 * 2**30})
    assert engine_cache.default_budget(gpu) == 39 * 2**30  # half of the 78 GiB free
    assert engine_cache.default_budget(Device("cpu", None)) == 16 * 2**20
    assert engine_cache.default_budget(Device("gpu", {})) == 16 * 2**20  # no memory statistics: the CPU default
    monkeypatch.delenv(engine_cache.BLOCK_CACHE_ENV, raising=False)
    assert engine_cache.block_cache_budget() == 16 * 2**20  # this machine's CPU
    monkeypatch.setenv(engine_cache.BLOCK_CACHE_ENV, "2000")
    assert engine_cache.block_cache_budget() == 2000 * 2**20


def test_tree_sum_has_a_fixed_order():
    parts = [np.float64(v) for v in (1e16, 1.0, -1e16, 1.0, 3.0)]
    # ((1e16 + 1) + (-1e16 + (1 + 3))) in float64
    assert tree_sum(parts) == (parts[0] + parts[1]) + (parts[2] + (parts[3] + parts[4]))
    assert tree_sum([{"a": np.ones(2)}] * 3)["a"].tolist() == [3.0, 3.0]
    with pytest.raises(ValueError):
        tree_sum([])


@pytest.mark.parametrize("seed", [0, 1, 7, 2**31, 2**32 - 1])
def test_the_schedules_key_data_are_jaxs_key_of_the_seed(seed):
    with float64():  # a seed of 2**31 or more is a uint32 only under x64
        expected = tuple(int(k) for k in np.asarray(jax.random.key_data(jax.random.key(seed))))
    assert key_data(seed) == expected


def test_schedule_visits_every_block_once_per_epoch():
    schedule = MinibatchSchedule(n_blocks=9, blocks_per_step=2, key_data=(0, 7))
    assert schedule.steps_per_epoch == 5
    for epoch in range(3):
        steps = [schedule.blocks(s) for s in range(epoch * 5, epoch * 5 + 5)]
        assert sorted(sum(steps, [])) == list(range(9)) and [len(s) for s in steps] == [2, 2, 2, 2, 1]
    assert schedule.blocks(3) != schedule.blocks(8) or schedule.blocks(4) != schedule.blocks(9)
    again = MinibatchSchedule(9, 2, (0, 7))
    assert [again.blocks(s) for s in range(15)] == [schedule.blocks(s) for s in range(15)]
    assert MinibatchSchedule(9, 9, (0, 7)).blocks(4) == list(range(9))
    assert schedule.ends_epoch(4) and not schedule.ends_epoch(5) and schedule.epoch_of(5) == 1


@pytest.mark.parametrize("value", ["local", "local:0", "tcp://host", "gpu", ""])
def test_bad_cluster_values(value):
    with pytest.raises(InputError, match="--cluster: expected local:N"):
        connect(value)


class CountingSource:
    """A block source that counts its reads (blocks of zeros)."""

    def __init__(self):
        self.reads = 0

    def read(self, index):
        self.reads += 1
        return Block(np.zeros((4, 2)), np.zeros(4), np.ones(4, bool))


def test_a_steps_second_pass_over_its_blocks_reads_nothing_whatever_the_budget():
    source, cache = CountingSource(), BlockCache(lambda: 0)
    first = list(cache.get_all(source, [0, 1]))
    again = list(cache.get_all(source, [0, 1]))  # the data term after the site statistics
    assert all(a is b for a, b in zip(again, first)) and source.reads == 2
    list(cache.get_all(source, [2]))
    list(cache.get_all(source, [0, 1]))
    assert source.reads == 5 and (len(cache), cache.nbytes) == (0, 0)  # released once other blocks were asked for


def test_a_call_larger_than_the_hold_limit_is_not_held():
    source = CountingSource()
    one_block = block_bytes(source.read(0))
    cache = BlockCache(lambda: 0, latest_call_bytes=2 * one_block)
    for _ in range(2):
        list(cache.get_all(source, [0, 1, 2]))  # an evaluation pass over a large test split
    assert source.reads == 1 + 6
    for _ in range(2):
        list(cache.get_all(source, [0, 1]))
    assert source.reads == 7 + 2


def test_cached_blocks_are_float64_arrays_on_the_default_device(binary_store):
    source = BlockSource.of(binary_store, "train", 48, TargetScaling())
    block = BlockCache().get(source, 0)
    assert all(isinstance(a, jax.Array) and a.devices() == {jax.devices()[0]} for a in block)
    assert block.x.dtype == np.float64 and block.mask.dtype == bool
    np.testing.assert_array_equal(block.x, source.read(0).x)
