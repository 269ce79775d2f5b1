"""The class-parallel step as the trainer runs it (``TrainConfig.parallel_over = "classes"``): the step of
:mod:`pep_gp.pipeline.training.class_groups` with its groups placed where the blocks are computed (the
backend's ``place``: one group per Dask worker, or in this process one per core, each on a thread of its own;
at most one per class) and its state left there between steps.

It is an ordinary step (``init``, ``update``, ``parts``, ``release`` of a
:class:`~pep_gp.pipeline.training.step.TrainStep`) whose state holds :class:`Held` handles instead of the
parameters and optimiser state, so a step moves only the ``[B, C]`` numbers that couple the classes
(Villacampa-Calvo & Hernández-Lobato 2017, eq. 6): the trainer gathers the arrays where it needs them
(``gather()``: an evaluation, a checkpoint, the end of a run, :func:`~pep_gp.pipeline.engine.gathered`), and
the step places the groups again from arrays it is given (a fresh start, a checkpoint resumed). The parameters
a step started from stay with the groups until the next step, so the trainer can keep them as its best
(``retain()``) without moving them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..engine import Backend
from ..engine.cache import BLOCKS
from ..errors import InputError
from ..models.protocol import spreads_classes
from .class_groups import ClassParallelStep, Groups, StoreRows
from .step import StepInfo, StepState, TrainStep


@dataclass(frozen=True, eq=False)
class Held:
    """The parameters (``part`` "params"), optimiser state ("opt_state") or kept best parameters ("best") of
    all classes as the groups of ``owner`` hold them after its step ``version``: a handle
    (:class:`~pep_gp.pipeline.engine.Handle`)."""

    owner: "ClassParallelTraining"
    version: int
    part: str

    def gather(self) -> Any:
        """The arrays, gathered from the groups (once per step)."""
        return self.owner.arrays(self)

    def retain(self) -> "Held":
        """These parameters, the latest step's start, kept by the groups as the best beyond the next step
        (with the next call): the handle of part "best"."""
        return self.owner.pinned(self)


class ClassParallelTraining:
    """The :class:`~pep_gp.pipeline.training.step.TrainStep` of ``step``, its groups placed by ``backend``.

    Args:
        step: the class-parallel step of the job's model and optimiser.
        plain: the job's step over rows (its ``init`` and the ``parts`` of the evidence are this step's too).
        backend: where the groups are placed (one per slot, at most one per class).
    """

    def __init__(self, step: ClassParallelStep, plain: TrainStep, backend: Backend):
        self.step, self.backend = step, backend
        self.init, self.parts = plain.init, plain.parts
        self.groups: Groups | None = None
        self.version = 0  # raised by every step and every placement: a Held names one state of one placement
        self.best_version: int | None = None
        self._gathered: dict[tuple[int, str], Any] = {}

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

    def pinned(self, start: Held) -> Held:
        """:meth:`Held.retain`: ``start``, the parameters the latest step started from, kept by the groups as
        the best (with the next call)."""
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

    def release(self) -> None:
        """Release the groups (on the workers: their memory); a later :meth:`update` places them again."""
        if self.groups is not None:
            self.groups.release()
        self.groups, self._gathered, self.best_version = None, {}, None
        self.version += 1

    def _held(self, part: str) -> Held:
        return Held(self, self.version, part)

    def _holds(self, state: StepState) -> bool:
        return (self.groups is not None and isinstance(state.params, Held) and isinstance(state.opt_state, Held)
                and state.params.owner is self and state.params.version == self.version
                and (state.params.part, state.opt_state.part) == ("params", "opt_state"))

    def _place(self, params: Any, opt_state: Any) -> None:
        """Groups of ``params`` and ``opt_state``, one per slot of the backend (at most one per class)."""
        self.release()
        count = min(self.backend.slots, self.step.model.num_classes)
        self.groups = Groups(self.step.groups(params, opt_state, count), self.backend.place)


def check_parallel_over(parallel_over: str, spec: Any, settings: Any) -> None:
    """InputError for ``parallel_over = "classes"`` with a model whose classes cannot be spread over the
    workers (:func:`~pep_gp.pipeline.models.protocol.spreads_classes`)."""
    if parallel_over == "classes" and not spreads_classes(spec, settings):
        raise InputError(f"parallel_over = classes spreads the classes of multi-class SEP (--model "
                         f"multiclass-sep) over the workers; --model {spec.name} is spread by rows: leave "
                         "parallel_over at rows")
