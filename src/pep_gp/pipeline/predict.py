"""Predictions of a trained run on new rows: what ``pep predict`` computes, chunk by chunk, on any backend.

A run directory holds everything needed (:func:`load_predictor`): the newest checkpoint's params (refused
if any is not finite), the model it was trained as (:class:`~pep_gp.pipeline.training.runs.Run`), the
training statistics ``x_mean``/``x_std`` the rows are standardised with, and the table's transformation
(:mod:`pep_gp.pipeline.data.transforms`). A chunk of a table is transformed to model features, cut into
blocks of the run's ``block_rows`` (padded, so each process compiles the model's predictive once) and
predicted with the model's :meth:`~pep_gp.pipeline.models.ModelSpec.predictive`:

* classification: ``log p(y = c | x)``, normalised in float64 so that each row's probabilities sum to 1
  (the multi-class predictive integrates by quadrature, whose sum may differ from 1 in the last digits);
  the label is the most probable class, in the user's values (the first such class on a tie);
* regression: the predictive mean and standard deviation of ``y`` (noise included), and for each
  requested level ``p`` the Gaussian interval ``mean ± Φ⁻¹((1 + p)/2)·std``.

:func:`predict` streams an input through a backend in order, with a bounded number of chunks in flight,
into an output written atomically (:mod:`pep_gp.pipeline.data.predictions`). The result is the same
whatever the backend: every chunk is computed by the same compiled function on the same blocks.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any

import jax
import numpy as np
import pandas as pd

from ..core import float64
from .data.frames import TableChunk
from .data.predictions import StoreRows, chunk_ids, open_input, open_output
from .data.transforms import Transforms
from .engine import Backend, InProcess
from .engine.threads import compute_threads
from .errors import InputError
from .models.predictive import class_probabilities, predict_in_blocks
from .training.runs import Run

CHUNKS_PER_WORKER = 2  # chunks in flight per worker: one computing, one waiting


@dataclass(frozen=True)
class RunPredictor:
    """A run's predictive distribution over rows of model features (as a store holds them).

    Attributes:
        model: the run's model name.
        task: ``classification`` or ``regression``.
        predictive: ``predict(params, x)`` on standardised rows (hashable: jitted once per process).
        params: the checkpoint's params (numpy arrays).
        x_mean, x_std: the training split's per-feature statistics.
        transforms: how a table's rows become model features; the class labels.
        block_rows: rows per compiled block.
    """

    model: str
    task: str
    predictive: Callable
    params: Any = field(repr=False)
    x_mean: np.ndarray = field(repr=False)
    x_std: np.ndarray = field(repr=False)
    transforms: Transforms = field(repr=False)
    block_rows: int = 1000

    def __call__(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """The predictive of rows ``x`` ``[n, D]`` of model features: ``{"proba": [n, C]}`` (each row
        summing to 1) or ``{"mean": [n], "std": [n]}``."""
        x = (np.asarray(x, dtype=np.float64) - self.x_mean) / self.x_std
        if x.shape[0] == 0:
            return ({"proba": np.zeros((0, self.transforms.n_classes))} if self.task == "classification"
                    else {"mean": np.zeros(0), "std": np.zeros(0)})
        with float64(), compute_threads():
            out = predict_in_blocks(self.predictive, self.params, x, self.block_rows)
        if self.task == "classification":
            return {"proba": class_probabilities(out["log_proba"])}
        return {"mean": out["mean"], "std": np.sqrt(out["var"])}


def load_predictor(run_dir: Path) -> RunPredictor:
    """The predictor of a run's newest intact checkpoint (:class:`~pep_gp.pipeline.training.runs.Run`).

    Raises:
        InputError: no checkpoint, a model without a predictive distribution of new rows, a manifest
            without a valid ``transforms`` record, or params that hold a NaN or an infinity.
    """
    run = Run.open(run_dir)
    predictive = run.spec.predictive(run.model, run.targets)
    if predictive is None:
        raise InputError(f"{run_dir}: --model {run.spec.name} has no predictive distribution of new rows (it "
                         "predicts from its training rows); train another model, e.g. sparse-gp-regressor, to predict")
    transforms = run.transforms
    if transforms is None:
        raise InputError(f"{run.restored.path}: manifest has no 'transforms' (written by an older pep); "
                         "train the run again")
    x_mean, x_std = (np.asarray(values, dtype=np.float64) for values in (run.manifest.x_mean, run.manifest.x_std))
    return RunPredictor(run.spec.name, run.spec.task, predictive, jax.device_get(run.finite_params()), x_mean, x_std,
                        transforms, run.manifest.config.rows_per_block)


@dataclass(frozen=True)
class ChunkPredictor:
    """What every process predicting chunks holds: the run's predictor and the output's intervals."""

    predictor: RunPredictor
    intervals: tuple[float, ...] = ()

    def __call__(self, chunk: TableChunk | StoreRows) -> tuple[pd.DataFrame, dict[str, Counter]]:
        """The prediction frame of a chunk (ids first), and the text values it held that were never
        seen at ingest, by column."""
        transforms, unseen = self.predictor.transforms, {}
        if isinstance(chunk, StoreRows):
            x, ids = chunk.read(), pd.DataFrame()
        else:
            x, ids = transforms.apply(chunk, unseen), chunk_ids(chunk, transforms.id_columns)
        return prediction_frame(self.predictor(x), transforms, self.intervals, ids), unseen


def prediction_columns(transforms: Transforms, intervals: Sequence[float]) -> list[str]:
    """The output's columns after the ids: ``label`` and ``proba_<label>`` per class (classification) or
    ``mean``, ``std`` and ``lower_<p>``/``upper_<p>`` per interval level ``p`` (regression)."""
    if transforms.labels is not None:
        return ["label", *(f"proba_{label}" for label in transforms.labels)]
    return ["mean", "std", *(f"{side}_{level:g}" for level in intervals for side in ("lower", "upper"))]


def prediction_frame(out: dict[str, np.ndarray], transforms: Transforms, intervals: Sequence[float],
                     ids: pd.DataFrame) -> pd.DataFrame:
    """The ids, then the columns of :func:`prediction_columns`."""
    if "proba" in out:
        values = [transforms.decode_labels(np.argmax(out["proba"], axis=1)), *out["proba"].T]
    else:
        z = [NormalDist().inv_cdf((1 + level) / 2) for level in intervals]
        values = [out["mean"], out["std"], *(out["mean"] + sign * q * out["std"] for q in z for sign in (-1, 1))]
    columns = {name: ids[name].to_numpy() for name in ids.columns}
    columns.update(zip(prediction_columns(transforms, intervals), values))
    return pd.DataFrame(columns)


def check_intervals(intervals: Sequence[float], task: str) -> tuple[float, ...]:
    """The ``--interval`` levels, each in (0, 1), for a regression run only.

    Raises:
        InputError: a level out of range, or levels for a classifier.
    """
    for level in intervals:
        if not 0 < level < 1:
            raise InputError(f"--interval: expected a level in (0, 1) such as 0.9, found {level}")
    if intervals and task != "regression":
        raise InputError("--interval: only for a regression run (this run is a classifier)")
    return tuple(intervals)


@dataclass(frozen=True)
class PredictSummary:
    """What ``pep predict`` did, as printed by ``--json``."""

    run_dir: str
    model: str
    input: str
    out: str
    rows: int
    columns: list[str]
    unseen: dict[str, dict[str, int]]  # text values never seen at ingest: column → value → rows
    seconds: float


def predict(run_dir: str | Path, input: str | Path, out: str | Path, *, sep: str | None = None,
            intervals: Sequence[float] = (), split: str = "all", overwrite: bool = False,
            backend: Backend | None = None, progress: Callable[[int], None] = lambda rows: None) -> PredictSummary:
    """Predict every row of ``input`` with the run in ``run_dir`` and write the predictions to ``out``.

    Args:
        run_dir: a run directory (``pep train``).
        input: a CSV or Parquet table with the run's feature (and id) columns, or a pep store.
        out: ``.csv``, ``.parquet`` or ``.zarr`` output path.
        sep: the CSV input's field separator (default ``,``).
        intervals: regression: the levels of the predictive intervals to add (e.g. 0.9).
        split: a store input's split: ``all``, ``train`` or ``test``.
        overwrite: replace an existing output.
        backend: where chunks are predicted (default: this process).
        progress: called with the rows written so far.

    Raises:
        InputError: bad options or input (nothing is written).
    """
    began = time.perf_counter()
    predictor = load_predictor(Path(run_dir))
    job = ChunkPredictor(predictor, check_intervals(intervals, predictor.task))
    source = open_input(Path(input), predictor.transforms, sep, split)
    clash = set(predictor.transforms.id_columns) & set(prediction_columns(predictor.transforms, job.intervals))
    if clash:
        raise InputError(f"{run_dir}: id column {sorted(clash)[0]!r} has the name of an output column; rename it "
                         "in the table and ingest it again")
    backend = backend or InProcess()
    unseen: dict[str, Counter] = {}
    columns: list[str] = []
    with open_output(Path(out), overwrite) as writer:
        window = CHUNKS_PER_WORKER * backend.n_workers
        for frame, chunk_unseen in backend.map_ordered(job, source.chunks(), window):
            writer.write(frame)
            columns = columns or list(frame.columns)
            for column, counts in chunk_unseen.items():
                unseen.setdefault(column, Counter()).update(counts)
            progress(writer.rows)
    return PredictSummary(str(run_dir), predictor.model, source.description, str(out), writer.rows, columns,
                          {column: dict(counts.most_common()) for column, counts in unseen.items()},
                          round(time.perf_counter() - began, 3))


def unseen_warning(unseen: dict[str, dict[str, int]], shown: int = 3) -> str | None:
    """One line about text values never seen at ingest (their rows got all-zero one-hot columns)."""
    if not unseen:
        return None
    parts = []
    for column, counts in unseen.items():
        values = ", ".join(repr(v) for v in list(counts)[:shown]) + (", …" if len(counts) > shown else "")
        parts.append(f"column {column!r}: {sum(counts.values()):,} rows hold values never seen in training ({values})")
    return "; ".join(parts) + "; their one-hot columns are all 0"
