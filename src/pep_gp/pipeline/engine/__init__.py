"""The distributed engine: one protocol for every distributed computation of pep, with handles in the
style of Dask's futures (what a computation leaves stays where it was computed until it is asked for).

The protocol, served alike by every backend (:class:`InProcess`, :class:`DaskBackend` over local worker
processes or a remote cluster):

* ``engine.submit(fn, inputs, blocks, keep=False) -> Pass`` evaluates ``fn(inputs, x, y, mask)`` on each
  listed block of a :class:`~pep_gp.pipeline.data.blocks.BlockSource`; ``Pass.sum()`` is the sum of the
  results in a fixed order (:func:`tree_sum`; :meth:`Engine.map_sum` is ``submit(...).sum()``). ``fn`` knows
  nothing of the engine: any hashable, picklable function returning a pytree (``value_and_grad`` of a
  model's data term, its site statistics, a held-out metric).
* ``keep=True``: ``fn`` returns ``(result, kept)`` and each block's ``kept`` stays where the block was
  computed; the :class:`Pass` is then a handle to them, given as the ``blocks`` of a second
  ``engine.submit(fn2, inputs2, first)``, which sums ``fn2(inputs2, shared, kept_b, y_b, mask_b)`` over the
  first pass's blocks (``shared``: that pass's block inputs, held once per process), sending only
  ``inputs2``. ``Pass.release()`` lets the kept parts go where they are (as Dask's ``Future.release``); a
  later keeping pass replaces them too. A step of a model with site updates makes its two passes this way
  and releases the first after the second.
* ``backend.place(objects) -> Placement`` leaves objects resident where blocks are computed (one per Dask
  worker, or in this process one per thread; ``backend.slots`` of them side by side);
  ``Placement.each(method, args)`` calls a method of every one at once and ``Placement.release()`` lets them
  go (:mod:`pep_gp.pipeline.engine.residents`). The class groups of the class-parallel step live this way
  (:mod:`pep_gp.pipeline.training.class_parallel`).
* A step that leaves its state where it is computed returns handles (:class:`Handle`), not arrays:
  ``gather()`` moves the arrays (a checkpoint, an evaluation, the end of a run: :func:`gathered`) and
  ``retain()`` keeps them beyond the next step (the trainer's best parameters: :func:`retained`).

The coordinator keeps no state of a pass beyond its handle: a backend's method set is ``sum`` (a pass:
plain, keeping, or from a keeping pass's handle), ``release`` (a keeping pass's parts), ``slots`` and
``place``, ``map_ordered`` (prediction's chunks of an input table, in order, outside the block protocol: they
are not blocks of a store and are not summed) and ``close``.

Backends:

* :class:`InProcess` — no Dask; blocks are computed in this process (notebooks, estimators, tests).
* :class:`DaskBackend` — a ``LocalCluster`` of worker *processes* (``local:N``; ``local:N:pinned``
  gives worker ``i`` core ``i mod cores`` alone: no oversubscription, the same bits, see below; its scheduler
  and nannies in a process of their own, :mod:`~pep_gp.pipeline.engine.cluster_process`) or an
  existing scheduler (``tcp://HOST:PORT``). Every worker runs a resident
  :class:`~pep_gp.pipeline.engine.backends.WorkerEngine` (a Dask worker plugin), and a pass over a
  step's blocks is one direct call to each worker, all in flight at once, over the cluster's own
  connections (TLS where the cluster uses it; no task, no scheduler in the way, so the coordinator must
  reach the workers). A call carries the pass's inputs and, the first time only, the block function and
  the source; the worker sums a whole subtree of the step's summation tree
  (:mod:`pep_gp.pipeline.engine.summation`) over its blocks, in the tree's order, and answers one partial
  sum without the results that are zero by construction. A
  :class:`~pep_gp.pipeline.engine.cache.Derived` block function derives its inputs where the blocks are
  (the step sends ``(θ, N)`` and each process computes the step-shared quantities with the coordinator's
  compiled program), and a step's second pass sends only what the site update changed. A call that fails (a lost worker) is made again on the workers left; a second pass
  whose kept parts were lost has them computed again by a worker that took part in the first pass (it
  holds that pass's inputs) or from the inputs sent again (the same bits).

Memory: every process that computes blocks keeps the blocks it read in a :class:`BlockCache` of at most
``PEP_BLOCK_CACHE_MB`` megabytes (default 16 on a CPU, half the free memory of a GPU: see
:func:`~pep_gp.pipeline.engine.cache.default_budget`; 0 turns it off), least recently used first out, plus the
blocks of its latest call when they total at most :data:`LATEST_CALL_MB` (one step's share of the
minibatch; not an evaluation pass over a large test split), which a step's second pass over the same
blocks (the data term after the site statistics) finds whatever the budget. Cached blocks live on JAX's
default device (a GPU's memory where there is one), so a block is copied there once, not per call. A
block evicted from it is read from Zarr again when next needed, which the operating system's page cache
and the ≤ 1 MiB chunks of ``pep ingest`` make cheap (0.75 ms per 1,000-row airline block, measured). A
worker's memory is therefore bounded by the budget plus :data:`LATEST_CALL_MB` whatever the number of
rows N: a store that fits in the budget is read once, a larger one costs a re-read per block per epoch.
A step's first pass also leaves what it keeps per block in that process's
:class:`~pep_gp.pipeline.engine.cache.Kept` (for multi-class SEP a few [C, M, rows] arrays per block, and
the pass's inputs) until the step releases it after its second pass (:meth:`Pass.release`).

Determinism: every block's result is computed by the same compiled function on the same inputs,
whatever process computes it, and the per-block results are summed in a fixed binary tree over the
block order (:func:`tree_sum`), whole subtrees on the workers and the rest on the coordinator, with the
same additions either way. The result is therefore bit-for-bit the same for any number of workers, for
any task timing and after a worker is lost — provided every process computes with the same thread
settings and the same compiled programs (XLA:CPU contracts a multiply and an add into one FMA only
within one fused kernel, so a step compiled as one program rounds differently from its pieces: the
in-process backend runs the pieces as the workers do). Three settings change the last bits (all
measured here):

* JAX's CPU Cholesky and triangular solves call the OpenBLAS/LAPACK that scipy loads, whose blocking
  follows its thread count: every backend computes under :func:`compute_threads` (one BLAS thread,
  applied per call with threadpoolctl, so it also holds in a notebook or test process);
* ``--xla_cpu_multi_thread_eigen`` changes some small dot products. XLA reads its flags once, when a
  process's backend starts, so a process that already ran JAX (a notebook, the test runner) cannot be
  pinned afterwards: pep therefore leaves XLA's flags at their defaults in every backend;
* XLA:CPU partitions some reductions by its thread-pool size, which follows the CPU affinity of the
  process when its JAX backend starts (a column sum of a (100, 2000) array differs between 1 and 2
  visible cores), so every process must start it seeing the same number of cores: true on one machine
  (a pinned worker starts its backend before it pins itself:
  :class:`~pep_gp.pipeline.engine.backends.OneCorePerWorker`); for remote workers use machines of the
  same type, or accept last-bit differences.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from ..data.blocks import BlockSource
from .cache import Keeping
from ..cluster_address import CLUSTER_HELP, parse_cluster
from .clusters import connect, connected
from .in_process import Backend, InProcess
from .summation import tree_sum

__all__ = ["CLUSTER_HELP", "Backend", "DaskBackend", "Engine", "Handle", "InProcess", "Pass", "connect",
           "connected", "gathered", "parse_cluster", "retained", "tree_sum"]


@runtime_checkable
class Handle(Protocol):
    """State a step left where it was computed (Dask's futures are the model)."""

    def gather(self) -> Any:
        """The arrays, moved here."""

    def retain(self) -> "Handle":
        """A handle to the same state that outlives the step's next update."""


def gathered(value: Any) -> Any:
    """``value`` as arrays: a :class:`Handle` gathered, anything else as it is."""
    return value.gather() if isinstance(value, Handle) else value


def retained(value: Any) -> Any:
    """``value`` kept beyond the step's next update: a :class:`Handle` retained, arrays as they are."""
    return value.retain() if isinstance(value, Handle) else value


class Pass:
    """A pass submitted to an :class:`Engine`: its sum and, for a keeping pass, the handle to what each of its
    blocks kept where it was computed (give it as the ``blocks`` of :meth:`Engine.submit`) and the backend
    that holds it."""

    def __init__(self, total: Any, keeping: Keeping | None = None, backend: Backend | None = None):
        self._total, self.keeping, self._backend = total, keeping, backend
        self.released = False

    def sum(self) -> Any:
        """The pass's sum over its blocks, in :func:`tree_sum`'s order."""
        return self._total

    def release(self) -> None:
        """Let go what the pass's blocks kept, where they were computed (Dask's ``Future.release``): no second
        pass runs from it afterwards. Nothing to do for a pass that kept nothing, or a second time."""
        if self.keeping is not None and not self.released:
            self._backend.release(self.keeping)
        self.released = True


class Engine:
    """Fixed-order sums over the blocks of one source, computed by a backend."""

    def __init__(self, backend: Backend, source: BlockSource):
        self.backend, self.source = backend, source

    def submit(self, fn: Callable, inputs: Any, blocks: Sequence[int] | Pass, keep: bool = False) -> Pass:
        """``Σ_{b in blocks} fn(inputs, *block_b)`` as a :class:`Pass` (see the module docstring); with
        ``keep``, ``fn`` returns ``(result, kept)`` and the pass sums the results. ``blocks`` a keeping
        :class:`Pass`: ``Σ_b fn(inputs, shared, kept_b, y_b, mask_b)`` over its blocks, from what it kept.

        Raises:
            ValueError: ``blocks`` is a pass that kept nothing or was released, or ``keep`` is asked of a
                second pass.
        """
        of = None
        if isinstance(blocks, Pass):
            if blocks.keeping is None or keep:
                raise ValueError("a second pass runs from a pass submitted with keep=True, and keeps nothing itself")
            if blocks.released:
                raise ValueError("a second pass runs from a keeping pass before it is released")
            of, blocks = blocks.keeping, blocks.keeping.blocks
        keeping = Keeping(uuid.uuid4().hex, fn, inputs, list(blocks)) if keep else None
        return Pass(self.backend.sum(fn, inputs, self.source, list(blocks), keep=keeping, of=of), keeping, self.backend)

    def map_sum(self, fn: Callable, inputs: Any, blocks: Sequence[int]) -> Any:
        """``submit(fn, inputs, blocks).sum()``."""
        return self.submit(fn, inputs, blocks).sum()

    def rows(self, blocks: Sequence[int]) -> int:
        """Real rows in ``blocks`` (the minibatch size |B|)."""
        return sum(self.source.rows_in(b) for b in blocks)


def __getattr__(name: str):
    """:class:`~pep_gp.pipeline.engine.backends.DaskBackend`, imported when first asked for (PEP 562): a process
    that computes in itself never imports Dask (:mod:`pep_gp.pipeline.engine.in_process`)."""
    if name == "DaskBackend":
        from .backends import DaskBackend

        return DaskBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
