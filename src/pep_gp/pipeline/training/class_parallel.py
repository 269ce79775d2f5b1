"""The class-parallel step as the trainer runs it (``TrainConfig.parallel_over = "classes"``): the step of
:mod:`pep_gp.pipeline.training.class_groups` with its groups placed where the blocks are computed (one group
per Dask worker, or in this process one per core, each on a thread of its own; at most one per class) and
its state left there between steps.

A step returns :class:`Held` handles instead of the parameters and optimiser state, so it moves only the
``[B, C]`` numbers that couple the classes (Villacampa-Calvo & Hernández-Lobato 2017, eq. 6); the trainer
gathers the arrays where it needs them (:meth:`ClassParallelTraining.arrays`: an evaluation, a checkpoint,
the end of a run), and places the groups again from arrays it is given (a fresh start, a checkpoint
resumed). The parameters a step started from stay with the groups until the next step, so the trainer can
keep them as its best (:meth:`ClassParallelTraining.pinned`) without moving them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..engine import DaskBackend
from ..engine.cache import BLOCKS
from ..errors import InputError
from ..models.protocol import spreads_classes
from ..runs.state import LoopState
from .class_groups import ClassParallelStep, InProcessGroups, StoreRows, WorkerGroups
from .step import StepInfo, StepState


@dataclass(frozen=True, eq=False)
class Held:
    """The parameters (``part`` "params"), optimiser state ("opt_state") or kept best parameters ("best") of
    all classes as the groups of ``owner`` hold them after its step ``version``."""

    owner: "ClassParallelTraining"
    version: int
    part: str


class ClassParallelTraining:
    """``update(StepState, batch) -> (StepState, StepInfo)`` (a
    :class:`~pep_gp.pipeline.training.step.TrainStep`'s) of ``step``, its groups on ``backend``'s workers.

    Args:
        step: the class-parallel step of the job's model and optimiser.
        backend: a :class:`~pep_gp.pipeline.engine.DaskBackend` (one group per worker) or the in-process one.
    """

    def __init__(self, step: ClassParallelStep, backend: Any):
        self.step, self.backend = step, backend
        self.groups: InProcessGroups | WorkerGroups | None = None
        self.version = 0  # raised by every step and every placement: a Held names one state of one placement
        self.best_version: int | None = None
        self._gathered: dict[tuple[int, str], Any] = {}

    @classmethod
    def replacing(cls, previous: "ClassParallelTraining | None", step: ClassParallelStep,
                  backend: Any) -> "ClassParallelTraining":
        """The class-parallel training of ``step`` after ``previous`` (None: the first), whose groups are
        released (:meth:`close`)."""
        if previous is not None:
            previous.close()
        return cls(step, backend)

    def update(self, state: StepState, batch: Any) -> tuple[StepState, StepInfo]:
        """One step on ``batch`` (an ``EngineBatch`` of the trainer: its engine's source, blocks, ``N/|B|`` and
        the rows of each class): the rows' inputs are read where each group is, the labels here."""
        if not self._holds(state):
            self._place(self.arrays(state.params), self.arrays(state.opt_state))
        source, blocks = batch.engine.source, tuple(batch.blocks)
        read = list(BLOCKS.get_all(source, blocks))
        y, mask = (np.concatenate([np.asarray(getattr(block, name)) for block in read]) for name in ("y", "mask"))
        info = self.step.update(self.groups, int(state.count), StoreRows(source, blocks), y, mask, batch.scale,
                                batch.data_size)
        self.version += 1
        return StepState(self._held("params"), self._held("opt_state"), state.count + 1), info

    def pinned(self, start: Any) -> Any:
        """``start``, the parameters the latest step started from, kept as the best: a :class:`Held` is kept
        by the groups (with the next call) and named by the Held of part "best" returned; arrays are kept
        as they are."""
        if not isinstance(start, Held):
            return start
        if start.owner is not self or start.part != "params" or start.version != self.version - 1:
            raise RuntimeError(f"only the latest step's start can be kept as the best: {start}")
        self.groups.keep_start = True
        self.best_version = start.version
        return Held(self, start.version, "best")

    def arrays(self, value: Any) -> Any:
        """``value`` as arrays: a :class:`Held` gathered from the groups (once per step), anything else as it
        is."""
        if not isinstance(value, Held):
            return value
        key = (value.version, value.part)
        if key not in self._gathered:
            current = value.version == self.version if value.part != "best" else value.version == self.best_version
            if value.owner is not self or not current:
                raise RuntimeError(f"{value} is no longer held (the groups are at step version {self.version})")
            self._gathered = {k: v for k, v in self._gathered.items()  # what is still held: current and best
                              if k[0] == (self.best_version if k[1] == "best" else self.version)}
            if value.part == "best":
                self._gathered[key] = self.step.best(self.groups)
            else:
                self._gathered[(value.version, "params")], self._gathered[(value.version, "opt_state")] = (
                    self.step.state(self.groups))
        return self._gathered[key]

    def close(self) -> None:
        """Release the groups (on the workers: their memory); a later :meth:`update` places them again."""
        if self.groups is not None:
            self.groups.close()
        self.groups, self._gathered, self.best_version = None, {}, None
        self.version += 1

    def _held(self, part: str) -> Held:
        return Held(self, self.version, part)

    def _holds(self, state: StepState) -> bool:
        return (self.groups is not None and isinstance(state.params, Held) and isinstance(state.opt_state, Held)
                and state.params.owner is self and state.params.version == self.version
                and (state.params.part, state.opt_state.part) == ("params", "opt_state"))

    def _place(self, params: Any, opt_state: Any) -> None:
        """Groups of ``params`` and ``opt_state``: one per worker of a Dask backend, else one per core of this
        process, each on a thread of its own (at most one per class either way)."""
        self.close()
        classes = self.step.model.num_classes
        if isinstance(self.backend, DaskBackend):
            count = min(self.backend.n_workers, classes)
            self.groups = WorkerGroups(self.backend.client, self.step.groups(params, opt_state, count))
        else:
            count = min(len(os.sched_getaffinity(0)), classes)
            self.groups = InProcessGroups(self.step.groups(params, opt_state, count), threads=count > 1)


def check_parallel_over(parallel_over: str, spec: Any, settings: Any) -> None:
    """InputError for ``parallel_over = "classes"`` with a model whose classes cannot be spread over the
    workers (:func:`~pep_gp.pipeline.models.protocol.spreads_classes`)."""
    if parallel_over == "classes" and not spreads_classes(spec, settings):
        raise InputError(f"parallel_over = classes spreads the classes of multi-class SEP (--model "
                         f"multiclass-sep) over the workers; --model {spec.name} is spread by rows: leave "
                         "parallel_over at rows")


def as_arrays(classes: ClassParallelTraining | None, value: Any) -> Any:
    """``value`` (params, optimiser state) as arrays: gathered where the class-parallel step ``classes`` holds
    it (:meth:`ClassParallelTraining.arrays`); as it is for a step over rows (``classes`` None)."""
    return value if classes is None else classes.arrays(value)


def with_arrays(classes: ClassParallelTraining | None, loop: LoopState) -> LoopState:
    """``loop`` with its params, optimiser state and best params as arrays (:func:`as_arrays`): what a
    checkpoint writes and a run returns."""
    if classes is None:
        return loop
    return dataclasses.replace(loop, params=classes.arrays(loop.params), opt_state=classes.arrays(loop.opt_state),
                               best_params=classes.arrays(loop.best_params))


@contextlib.contextmanager
def released(current: Callable[[], ClassParallelTraining | None]) -> Iterator[None]:
    """Around a segment of training: afterwards the groups of the class-parallel step ``current()`` (the
    trainer's at the end: a resumed run may have built another) are released, raised or not; a later segment
    places them again from the arrays the loop's state holds (:func:`with_arrays`)."""
    try:
        yield
    finally:
        classes = current()
        if classes is not None:
            classes.close()
