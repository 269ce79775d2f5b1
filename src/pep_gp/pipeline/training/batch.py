"""The blocks a trainer reads besides its epochs' order (:mod:`pep_gp.pipeline.training.sampling`): a
minibatch as its step sees it (:class:`EngineBatch`) and the sample of rows its model's ``init`` starts from
(:func:`init_sample`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..engine import Engine, Pass

INIT_ROWS = 5_000  # training rows sampled to place the inducing inputs (k-means) and lengthscales


@dataclass(frozen=True)
class EngineBatch:
    """A minibatch of blocks as the step sees it (:class:`pep_gp.pipeline.training.step.Minibatch`)."""

    engine: Engine
    blocks: list[int]
    scale: float
    data_size: Any  # the model's spec's data_size: N, or the rows of each class

    def submit(self, fn: Callable, inputs: Any, kept: Pass | None = None, keep: bool = False) -> Pass:
        return self.engine.submit(fn, inputs, self.blocks if kept is None else kept, keep=keep)


def init_sample(source: Any, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The standardised inputs and the targets (model units) of about :data:`INIT_ROWS` training rows of
    ``source``: whole blocks drawn with ``seed``, in order."""
    count = min(source.n_blocks, math.ceil(INIT_ROWS / source.block_rows))
    chosen = np.sort(np.random.default_rng(seed).choice(source.n_blocks, count, replace=False))
    blocks = [source.read(int(b)) for b in chosen]
    return np.concatenate([b.x[b.mask] for b in blocks]), np.concatenate([b.y[b.mask] for b in blocks])
