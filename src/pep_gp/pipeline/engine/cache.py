"""What runs wherever blocks are computed (a worker process or this one): the per-process block cache
and the compiled per-block evaluation. Both caches live per process (:mod:`pep_gp.pipeline.engine`)."""

from __future__ import annotations

import math
import os
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from ...core import float64
from ..data.blocks import Block, BlockSource
from ..errors import InputError
from .summation import structural_zeros, tree_sum, without_zeros
from .threads import compute_threads

BLOCK_CACHE_ENV = "PEP_BLOCK_CACHE_MB"
DEFAULT_BLOCK_CACHE_MB = 16.0
GPU_CACHE_FRACTION = 0.5
"""On a GPU, the default budget is this fraction of the device's free memory when the cache is first
used: 16 MB made pep 4.72× GPyTorch's epoch at minibatch 10,000 on an H100 (every block read and copied
to the device at each step) and 2,000 MB 0.65× (docs/results/gpytorch.md, compare_gpu*.json)."""


def block_cache_budget() -> int:
    """The block cache's budget in bytes: ``$PEP_BLOCK_CACHE_MB`` megabytes (2**20 bytes, fractions
    allowed); unset, :func:`default_budget`.

    Raises:
        InputError: the variable is not a finite number ≥ 0.
    """
    text = os.environ.get(BLOCK_CACHE_ENV)
    if text is None:
        return default_budget(jax.devices()[0])
    try:
        megabytes = float(text)
    except ValueError:
        megabytes = math.nan
    if not (math.isfinite(megabytes) and megabytes >= 0):
        raise InputError(f"{BLOCK_CACHE_ENV}: expected a finite number of megabytes >= 0, found {text!r}")
    return int(megabytes * 2**20)


@lru_cache(maxsize=None)
def default_budget(device: Any) -> int:
    """The budget without ``$PEP_BLOCK_CACHE_MB``: on a GPU, :data:`GPU_CACHE_FRACTION` of its memory free
    at the first call (blocks then stay on the device after their first read), else
    :data:`DEFAULT_BLOCK_CACHE_MB` (it bounds a CPU worker's host memory)."""
    stats = device.memory_stats() if device.platform == "gpu" else None
    if stats and "bytes_limit" in stats:
        return int(GPU_CACHE_FRACTION * (stats["bytes_limit"] - stats.get("bytes_in_use", 0)))
    return int(DEFAULT_BLOCK_CACHE_MB * 2**20)


LATEST_CALL_MB = 256
"""The blocks of a :meth:`BlockCache.get_all` call are held for the next call up to this many megabytes
(a 10,000-row Fashion-MNIST minibatch is 63 MB in float64)."""


def block_bytes(block: Block) -> int:
    """Memory held by a block's arrays."""
    return block.x.nbytes + block.y.nbytes + block.mask.nbytes


class BlockCache:
    """The blocks this process read, as float64 arrays on JAX's default device, least recently used
    first out, at most ``budget()`` bytes; and, beyond the budget, the blocks of the latest
    :meth:`get_all` call if they total at most ``latest_call_bytes``.

    A block larger than the budget is returned but not kept; a budget of 0 keeps nothing. The budget is
    read at every call, so a changed ``$PEP_BLOCK_CACHE_MB`` applies from the next block on.

    Args:
        budget: returns the budget in bytes (default :func:`block_cache_budget`).

    Example:
        >>> cache = BlockCache(lambda: 2**20)  # 1 MB, whatever $PEP_BLOCK_CACHE_MB says
        >>> first = cache.get(source, 0)  # read from Zarr and kept
        >>> cache.get(source, 0) is first  # until 1 MB of more recently used blocks push it out
        True
    """

    def __init__(self, budget: Callable[[], int] = block_cache_budget, latest_call_bytes: int = LATEST_CALL_MB * 2**20):
        self.budget, self.latest_call_bytes = budget, latest_call_bytes
        self.nbytes = 0
        self._blocks: OrderedDict[tuple[BlockSource, int], Block] = OrderedDict()
        self._latest: tuple[tuple[BlockSource, tuple[int, ...]], list[Block]] | None = None

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, key: tuple[BlockSource, int]) -> bool:
        return key in self._blocks

    def get(self, source: BlockSource, index: int) -> Block:
        """Block ``index`` of ``source``: from the cache if held (it becomes the most recent), else
        read from Zarr and kept if it fits the budget."""
        budget = self.budget()
        self._trim(budget)
        key = (source, index)
        if key in self._blocks:
            self._blocks.move_to_end(key)
            return self._blocks[key]
        with float64():
            block = Block(*jax.device_put(tuple(source.read(index))))
        size = block_bytes(block)
        if size <= budget:
            self._trim(budget - size)
            self._blocks[key] = block
            self.nbytes += size
        return block

    def get_all(self, source: BlockSource, indices: Sequence[int]) -> Iterator[Block]:
        """Blocks ``indices`` of ``source``, one at a time (as :meth:`get`); asked for the same blocks as
        the latest call, it yields them without a read, whatever the budget, when that call's blocks
        totalled at most ``latest_call_bytes``."""
        key, latest = (source, tuple(indices)), self._latest
        if latest is not None and latest[0] == key:
            yield from latest[1]
            return
        self._latest = None  # released before the next blocks are read
        held: list[Block] | None = []  # None once the call outgrows latest_call_bytes
        size = 0
        for index in indices:
            block = self.get(source, index)
            size += block_bytes(block)
            if held is not None and size <= self.latest_call_bytes:
                held.append(block)
            else:
                held = None
            yield block
        if held is not None:
            self._latest = (key, held)

    def _trim(self, limit: int) -> None:
        """Drop least recently used blocks until at most ``limit`` bytes are held."""
        while self.nbytes > limit:
            _, block = self._blocks.popitem(last=False)
            self.nbytes -= block_bytes(block)


BLOCKS = BlockCache()
"""This process's block cache (on a worker: the blocks of the tasks it ran)."""


@lru_cache(maxsize=32)
def compiled_program(fn: Callable) -> Callable:
    """``jax.jit(fn)``, kept per process so that equal functions compile once (static block shape)."""
    return jax.jit(fn)


_ZEROS: dict[Any, list[bool]] = {}
"""Per block function and argument shapes: which of its results are zero by construction."""


class Derived(NamedTuple):
    """A block function whose inputs are derived from what the pass sends, where the blocks are computed:
    ``fn(derive(inputs), *block)``, ``derive`` called once per pass and process (it runs compiled programs
    through :func:`derived`, so every process derives the same bits, and none need travel)."""

    fn: Callable
    derive: Callable


def resolve(fn: Callable, inputs: Any) -> tuple[Callable, Any]:
    """``fn``'s block function and its inputs: those of a :class:`Derived` derived, else as given."""
    return (fn.fn, fn.derive(inputs)) if isinstance(fn, Derived) else (fn, inputs)


_DERIVED: list[tuple[Any, list, Any]] = []
"""The latest :func:`derived` call: its key, its arguments' leaves (held so their ids stay theirs), its result."""


def derived(program: Callable, args: tuple) -> Any:
    """``jit(program)(*args)`` (compiled once per process), computed again only when the arguments are
    other objects than at the latest call: the step's coordinator and the in-process backend's
    :class:`Derived` block function share one evaluation of the step-shared quantities."""
    leaves = jax.tree_util.tree_leaves(args)
    key = (program, jax.tree_util.tree_structure(args), tuple(map(id, leaves)))
    if not _DERIVED or _DERIVED[0][0] != key:
        _DERIVED[:] = [(key, leaves, compiled_program(program)(*args))]
    return _DERIVED[0][2]

class NotHeld(LookupError):
    """A call refers to something this process was not sent (it was restarted, or is new): the caller
    sends it again."""


@dataclass
class Keeping:
    """What a keeping pass's handle (:class:`~pep_gp.pipeline.engine.Pass`) holds on the coordinator: its
    token, its block function and inputs (what computes a block's kept part again), its blocks and the
    workers whose parts are still there (a backend's own record: after a failed call a worker's are not)."""

    token: str
    fn: Callable
    inputs: Any
    blocks: list[int]
    workers: set[str] = field(default_factory=set)


class Kept:
    """What the latest keeping pass (:func:`sum_blocks` with ``keep``) kept per block in this process, and
    how to compute a block's part again. One per process that computes blocks (the in-process backend's,
    each worker's :class:`~pep_gp.pipeline.engine.backends.WorkerEngine`); held until the pass is released
    (:meth:`release`) or a new keeping pass replaces it (a step keeps its first pass's rows for its second
    pass only)."""

    def __init__(self) -> None:
        self.token: str | None = None
        self.first: tuple[Callable, Any] | None = None  # the keeping pass's block function and inputs
        self.parts: dict[int, Any] = {}

    def start(self, token: str, fn: Callable, inputs: Any) -> None:
        """Drop what is held and hold the parts of the keeping pass ``token`` from now on."""
        self.token, self.first, self.parts = token, (fn, inputs), {}

    def release(self, token: str) -> None:
        """Drop what the keeping pass ``token`` kept here (nothing if a later pass replaced it)."""
        if token == self.token:
            self.token, self.first, self.parts = None, None, {}

    def part(self, token: str, index: int, block: Block, first: tuple[Callable, Any] | None) -> Any:
        """Block ``index``'s part of the keeping pass ``token``: held, or computed again (the same bits)
        from ``first`` (that pass's function and inputs) or, when not given, the ones held here.

        Raises:
            NotHeld: neither the part nor the keeping pass's inputs are here.
        """
        if token == self.token and index in self.parts:
            return self.parts[index]
        fn, inputs = resolve(*self._first(token, first))
        return compiled_program(fn)(inputs, *block)[1]

    def shared(self, token: str, first: tuple[Callable, Any] | None) -> Any:
        """The block inputs of the keeping pass ``token`` (derived where its function is :class:`Derived`:
        the same evaluation as that pass's, see :func:`derived`), from ``first`` or the ones held here."""
        return resolve(*self._first(token, first))[1]

    def _first(self, token: str, first: tuple[Callable, Any] | None) -> tuple[Callable, Any]:
        first = first or (self.first if token == self.token else None)
        if first is None:
            raise NotHeld(f"the kept parts of pass {token} are not in this process")
        return first


def _result_zeros(fn: Callable, compiled: Callable, args: tuple) -> list[bool]:
    """:func:`~pep_gp.pipeline.engine.summation.structural_zeros` of ``fn``'s results, traced once per shape."""
    leaves, treedef = jax.tree_util.tree_flatten(args)
    key = (fn, treedef, tuple((leaf.shape, str(leaf.dtype)) for leaf in leaves))
    if key not in _ZEROS:
        _ZEROS[key] = structural_zeros(compiled.trace(*args).jaxpr)
    return _ZEROS[key]


def sum_blocks(fn: Callable, inputs: Any, source: BlockSource, blocks: Sequence[int], kept: Kept | None = None,
               keep: str | None = None, of: str | None = None, first: tuple[Callable, Any] | None = None,
               to_host: bool = True) -> Any:
    """``Σ_b fn(inputs, *block_b)`` over ``blocks`` in :func:`~pep_gp.pipeline.engine.summation.tree_sum`'s
    order (``fn`` may be :class:`Derived`), this process's share of a pass.

    * ``keep``: ``fn`` returns ``(result, kept part)`` and each block's part stays in ``kept`` under the
      token ``keep``; the pass sums the results.
    * ``of``: the pass sums ``fn(inputs, shared, part_b, y_b, mask_b)`` from the parts the keeping pass ``of``
      left in ``kept``, ``shared`` that pass's block inputs (a :class:`Derived` function's derived ones), held
      once per process rather than copied into every block's part. A block whose part is not there (this
      process did not compute it, or was restarted) has it computed again from ``first``, the keeping pass's
      function and inputs, or the ones ``kept`` holds (:meth:`Kept.part`), which gives the same bits.

    ``to_host``: numpy arrays, with the results that are zero by construction as
    :class:`~pep_gp.pipeline.engine.summation.Zero` (what travels from a worker); else JAX arrays on the device
    (in-process).

    Raises:
        NotHeld: ``of`` and neither ``first`` nor the keeping pass's function and inputs are here."""
    with float64(), compute_threads():
        if of is None:
            fn, inputs = resolve(fn, inputs)
        else:
            shared = kept.shared(of, first)
        compiled = compiled_program(fn)
        if keep is not None:
            kept.start(keep, fn, inputs)
        results = []
        for index, block in zip(blocks, BLOCKS.get_all(source, blocks)):
            args = ((inputs, *block) if of is None
                    else (inputs, shared, kept.part(of, index, block, first), block.y, block.mask))
            result = compiled(*args)
            if keep is not None:
                result, kept.parts[index] = result
            results.append(result)
        if not to_host:
            return _device_sum(results)
        # The results' leaves come first among fn's outputs (before what is kept).
        zeros = _result_zeros(fn, compiled, args)[:len(jax.tree_util.tree_leaves(results[0]))]
        return tree_sum([without_zeros(part, zeros) for part in jax.device_get(results)])


def _device_sum(parts: list) -> Any:
    """:func:`~pep_gp.pipeline.engine.summation.tree_sum` of device arrays on the device, one program per
    number of parts (additions only: the same IEEE sums as on the host)."""
    return parts[0] if len(parts) == 1 else _tree_sum_on_device(parts)


@jax.jit
def _tree_sum_on_device(parts: list) -> Any:
    return tree_sum(parts, jnp.add)
