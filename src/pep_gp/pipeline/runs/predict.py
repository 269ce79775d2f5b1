"""Predictions of a trained run on new rows: what ``pep predict`` computes, chunk by chunk, on any backend.

A run directory holds everything needed (:func:`load_predictor`): the newest checkpoint's params (refused
if any is not finite), the model it was trained as (:class:`~pep_gp.pipeline.runs.run.Run`), the
training statistics ``x_mean``/``x_std`` the rows are standardised with, and the table's transformation
(:mod:`pep_gp.pipeline.data.transforms`). A chunk of a table is transformed to model features, cut into
blocks of the run's ``block_rows`` (padded, so each process compiles the model's predictive once) and
predicted with the model's :meth:`~pep_gp.pipeline.models.ModelSpec.predictive`:

* classification: ``log p(y = c | x)``, normalised in float64 so that each row's probabilities sum to 1
  (the multi-class predictive integrates by quadrature, whose sum may differ from 1 in the last digits);
  the label is the most probable class, in the user's values (the first such class on a tie);
* regression: the predictive mean and standard deviation of ``y`` (noise included; of each target,
  ``mean_<target>`` and ``std_<target>``, for a model of several targets per row: the multi-output
  regressor, whose runs take none of the options below), and for each
  requested level ``p`` the central interval of the model's own predictive, its quantiles of levels
  ``(1 − p)/2`` and ``(1 + p)/2`` (``mean ± Φ⁻¹((1 + p)/2)·std`` for a Gaussian predictive; a Student-t's,
  a count model's or a deep GP's by its quadrature or mixture, as ``predict_quantiles``).

On request (:class:`Outputs`, ``pep predict --latent/--quantiles/--samples``) also the latent function's
mean and variance (``predict_f``), the quantiles of ``y``'s predictive (``predict_quantiles``: Gaussian,
the likelihood's by quadrature, or the deep GP's mixture) and draws of ``y`` (a class label, or a value) from each row's predictive. The
draws of row ``r`` use the uniforms of ``fold_in(key(seed), r)`` (``r``: the row's line of a CSV file, its
row of a Parquet file, its position in a store's split order), so they are the same whatever the backend
or the chunking; a value is the predictive's quantile at such a uniform (inverse-CDF sampling), a label
the class whose cumulative probability first exceeds it. Draws are per row (the marginal predictive), not
joint across rows: for joint draws use an estimator's ``sample_y``.

:func:`predict` streams an input through a backend in order, with a bounded number of chunks in flight,
into an output written atomically (:mod:`pep_gp.pipeline.data.predictions`). The result is the same
whatever the backend: every chunk is computed by the same compiled function on the same blocks.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from ...core import float64
from ..data.blocks import TargetScaling
from ..data.frames import TableChunk
from ..data.predictions import PredictInput, StoreRows, chunk_ids, open_input, open_output
from ..data.transforms import Transforms
from ..engine import Backend, InProcess
from ..engine.threads import compute_threads
from ..errors import InputError
from ..models.predictive import Latent, Quantiles, check_quantiles, class_probabilities, predict_in_blocks
from .run import Run

CHUNKS_PER_WORKER = 2  # chunks in flight per worker: one computing, one waiting
SAMPLE_BYTES = 2 * 2**30
"""The most bytes the draws of one chunk of rows may take (``pep predict --samples``): ``rows × samples``
float64 uniforms and as many draws, 16 bytes a draw, so at most 2,048 draws per row of a table's chunk of
65,536 rows (:func:`check_samples`)."""


@dataclass(frozen=True)
class Outputs:
    """What a prediction holds besides the predictive's columns (``pep predict``'s options).

    Attributes:
        intervals: regression: levels ``p`` of the central predictive intervals ``lower_<p>``/``upper_<p>``.
        latent: the latent function's mean and variance ``f_mean``/``f_var`` (per class:
            ``f_mean_<label>``/``f_var_<label>`` for a multi-class model), as ``predict_f``.
        quantiles: regression: levels ``p`` of the predictive quantiles ``q_<p>`` (as ``predict_quantiles``).
        samples: draws ``sample_0`` … of ``y`` per row (labels, or values), seeded by ``seed``.
        seed: the draws' seed.
    """

    intervals: tuple[float, ...] = ()
    latent: bool = False
    quantiles: tuple[float, ...] = ()
    samples: int = 0
    seed: int = 0


@partial(jax.jit, static_argnums=2)
def row_uniforms(seed, rows, n: int):
    """``[len(rows), n]`` uniforms in ``(0, 1)``, row ``r``'s from ``fold_in(key(seed), r)``."""
    key = jax.random.key(seed)
    return jax.vmap(lambda r: jax.random.uniform(jax.random.fold_in(key, r), (n,), jnp.float64,
                                                 minval=np.finfo(np.float64).tiny))(rows)


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
        latent: the latent moments ``predict(params, x)`` in model units (:class:`Latent`).
        targets: the regression targets' scaling (model units → the user's).
        latent_per_class: one latent function per class (a multi-class model).
        per_target: a predictive of each target of a row (``[n, P]``; :func:`prediction_columns`).
    """

    model: str
    task: str
    predictive: Callable
    params: Any = field(repr=False)
    x_mean: np.ndarray = field(repr=False)
    x_std: np.ndarray = field(repr=False)
    transforms: Transforms = field(repr=False)
    block_rows: int = 1000
    latent: Callable | None = field(default=None, repr=False)
    targets: TargetScaling = TargetScaling()
    latent_per_class: bool = False
    per_target: bool = False

    def __call__(self, x: np.ndarray, outputs: Outputs = Outputs(), rows: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """The predictive of rows ``x`` ``[n, D]`` of model features: ``{"proba": [n, C]}`` (each row
        summing to 1) or ``{"mean": [n], "std": [n]}``, and what ``outputs`` asks for: ``f_mean``/``f_var``
        (``[n]`` or ``[n, C]``), ``quantiles`` ``[n, Q]``, ``samples`` ``[n, S]`` (class indices, or values)
        drawn with the uniforms of the rows' numbers ``rows`` (default ``0 … n − 1``)."""
        x = (np.asarray(x, dtype=np.float64) - self.x_mean) / self.x_std
        n = x.shape[0]
        if n == 0:  # one row's outputs, cut to none: the shapes of every output
            return {key: value[:0] for key, value in self(self.x_mean[None], outputs).items()}
        with float64(), compute_threads():
            out = predict_in_blocks(self.predictive, self.params, x, self.block_rows)
            result = ({"proba": class_probabilities(out["log_proba"])} if self.task == "classification"
                      else {"mean": out["mean"], "std": np.sqrt(out["var"])})
            if outputs.latent:
                latent = predict_in_blocks(self.latent, self.params, x, self.block_rows)
                result["f_mean"] = latent["mean"] * self.targets.scale + self.targets.shift
                result["f_var"] = latent["var"] * self.targets.scale**2
            ends = [end for level in outputs.intervals for end in ((1 - level) / 2, (1 + level) / 2)]
            if ends or outputs.quantiles:  # the intervals' ends and the quantiles: one program, one pass
                levels = np.asarray([*ends, *outputs.quantiles])
                values = self._quantiles(x, np.broadcast_to(levels, (n, levels.size)))
                result["intervals"], result["quantiles"] = values[:, :len(ends)], values[:, len(ends):]
            if outputs.samples:
                rows = np.arange(n) if rows is None else np.asarray(rows)
                uniforms = np.asarray(row_uniforms(outputs.seed, rows.astype(np.uint32), outputs.samples))
                result["samples"] = (self._quantiles(x, uniforms) if self.task == "regression" else np.minimum(
                    (np.cumsum(result["proba"], axis=1)[:, None, :] < uniforms[:, :, None]).sum(axis=2),
                    result["proba"].shape[1] - 1))
        return result

    def _quantiles(self, x: np.ndarray, levels: np.ndarray) -> np.ndarray:
        return predict_in_blocks(Quantiles(self.predictive), self.params, x, self.block_rows, levels)["quantiles"]


def load_predictor(run_dir: Path, na: str | None = None) -> RunPredictor:
    """The predictor of a run's newest intact checkpoint (:class:`~pep_gp.pipeline.runs.run.Run`).

    ``na`` is what a missing value in a row to predict does (``pep predict --na``): ``fail`` refuses it,
    ``drop`` leaves its row out, ``mean`` fills in the training mean
    (:meth:`~pep_gp.pipeline.data.transforms.Transforms.for_new_rows`); None: ``mean`` for data ingested
    with ``--na mean``, else ``fail``.

    Raises:
        InputError: no checkpoint, a model without a predictive distribution of new rows, a manifest
            without a valid ``transforms`` record, params that hold a NaN or an infinity, or a bad ``na``.
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
    transforms = transforms.for_new_rows(na or ("mean" if transforms.na == "mean" else "fail"), x_mean)
    return RunPredictor(run.spec.name, run.spec.task, predictive, jax.device_get(run.params), x_mean, x_std,
                        transforms, run.manifest.config.rows_per_block, Latent(run.model), run.targets,
                        run.spec.task == "classification" and run.spec.n_classes != 2,
                        getattr(predictive, "per_target", False))


@dataclass(frozen=True)
class ChunkPredictor:
    """What every process predicting chunks holds: the run's predictor and what the output holds."""

    predictor: RunPredictor
    outputs: Outputs = Outputs()

    def __call__(self, chunk: TableChunk | StoreRows) -> tuple[pd.DataFrame, dict[str, Counter], int]:
        """The prediction frame of a chunk (ids first), the text values it held that were never seen at
        ingest, by column, and the number of its rows left out for a missing value (``--na drop``)."""
        transforms, unseen, dropped = self.predictor.transforms, {}, 0
        if isinstance(chunk, StoreRows):
            x, ids = chunk.read(), pd.DataFrame()
            rows = chunk.first_row + np.arange(x.shape[0])
        else:
            if transforms.na == "drop":
                complete = transforms.complete(chunk)
                chunk, dropped = chunk.subset(complete), int(np.count_nonzero(~complete))
            x, ids, rows = transforms.apply(chunk, unseen), chunk_ids(chunk, transforms.id_columns), chunk.rows
        out = self.predictor(x, self.outputs, rows)
        return (prediction_frame(out, transforms, self.outputs, ids, self.predictor.latent_per_class,
                                 self.predictor.per_target), unseen, dropped)


def prediction_columns(transforms: Transforms, outputs: Outputs = Outputs(), latent_per_class: bool = False,
                       per_target: bool = False) -> list[str]:
    """The output's columns after the ids: ``label`` and ``proba_<label>`` per class (classification),
    ``mean_<target>`` then ``std_<target>`` per target (``per_target``: a predictive of each target of a row), or
    ``mean``, ``std`` and ``lower_<p>``/``upper_<p>`` per interval level ``p`` (regression); then, as
    ``outputs`` asks, ``f_mean`` and ``f_var`` (``f_mean_<label>``, ``f_var_<label>`` per class of a
    multi-class model), ``q_<p>`` per quantile level ``p``, and ``sample_0`` … ``sample_<S−1>``."""
    if transforms.labels is not None:
        columns = ["label", *(f"proba_{label}" for label in transforms.labels)]
    elif per_target:
        columns = [f"{moment}_{target}" for moment in ("mean", "std") for target in transforms.target_columns]
    else:
        columns = ["mean", "std", *(f"{side}_{level:g}" for level in outputs.intervals for side in ("lower", "upper"))]
    if outputs.latent:
        columns += ([f"f_{moment}_{label}" for moment in ("mean", "var") for label in transforms.labels]
                    if latent_per_class else ["f_mean", "f_var"])
    return [*columns, *(f"q_{level:g}" for level in outputs.quantiles),
            *(f"sample_{i}" for i in range(outputs.samples))]


def prediction_frame(out: dict[str, np.ndarray], transforms: Transforms, outputs: Outputs, ids: pd.DataFrame,
                     latent_per_class: bool = False, per_target: bool = False) -> pd.DataFrame:
    """The ids, then the columns of :func:`prediction_columns`."""
    if "proba" in out:
        values = [transforms.decode_labels(np.argmax(out["proba"], axis=1)), *out["proba"].T]
    elif per_target:
        values = [*out["mean"].T, *out["std"].T]
    else:
        values = [out["mean"], out["std"], *(out["intervals"].T if outputs.intervals else ())]
    if outputs.latent:
        values += [*out["f_mean"].T, *out["f_var"].T] if latent_per_class else [out["f_mean"], out["f_var"]]
    values += [*out["quantiles"].T] if outputs.quantiles else []
    if outputs.samples:
        values += ([transforms.decode_labels(draws) for draws in out["samples"].T] if "proba" in out
                   else [*out["samples"].T])
    columns = {name: ids[name] for name in ids.columns}  # their own dtypes (a Parquet input's integers)
    columns.update(zip(prediction_columns(transforms, outputs, latent_per_class, per_target), values))
    return pd.DataFrame(columns)


def check_outputs(outputs: Outputs, task: str, per_target: bool = False) -> Outputs:
    """``pep predict``'s output options checked against the run's task (and ``per_target``: a predictive of
    each target of a row, which gives their means and deviations only).

    Raises:
        InputError: an interval level out of (0, 1), a quantile level out of (0, 1), intervals or
            quantiles for a classifier, any option but those two columns per target for ``per_target``, or a
            negative number of samples.
    """
    if per_target:
        asked = [option for option, given in (("--interval", outputs.intervals), ("--latent", outputs.latent),
                                              ("--quantiles", outputs.quantiles), ("--samples", outputs.samples))
                 if given]
        if asked:
            raise InputError(f"{asked[0]}: not available for a multi-output run (it predicts each "
                             "target's mean_<target> and std_<target>; MultiOutputGPRegressor's predict(X, "
                             "return_cov=True) gives their covariance)")
    for level in outputs.intervals:
        if not 0 < level < 1:
            raise InputError(f"--interval: expected a level in (0, 1) such as 0.9, found {level}")
    if outputs.intervals and task != "regression":
        raise InputError("--interval: only for a regression run (this run is a classifier)")
    if outputs.quantiles:
        check_quantiles(outputs.quantiles)
        if task != "regression":
            raise InputError("--quantiles: only for a regression run (this run is a classifier; --samples draws labels)")
    if outputs.samples < 0:
        raise InputError(f"--samples: expected a number of draws ≥ 0, found {outputs.samples}")
    return Outputs(tuple(outputs.intervals), bool(outputs.latent), tuple(outputs.quantiles), int(outputs.samples),
                   int(outputs.seed))


def check_samples(samples: int, source: PredictInput) -> None:
    """InputError unless ``samples`` draws of each row of one of ``source``'s chunks (at most its
    ``chunk_rows``) fit in :data:`SAMPLE_BYTES`: checked before any draw, or any output column, is made.

    Raises:
        InputError: naming the bytes asked for, the budget and the most draws per row this input allows.
    """
    needed = 16 * samples * source.chunk_rows
    if needed > SAMPLE_BYTES:
        raise InputError(f"--samples {samples:,}: the draws of a chunk of {source.chunk_rows:,} rows would take "
                         f"{needed / 2**30:,.0f} GiB, more than the {SAMPLE_BYTES // 2**30} GiB pep predict allows; "
                         f"at most {SAMPLE_BYTES // (16 * source.chunk_rows):,} draws per row")


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
    dropped: int = 0  # rows left out for a missing value (--na drop)


@dataclass(frozen=True)
class PredictJob:
    """A prediction checked before anything is computed (:func:`prepared`): the run's predictor, the chunk job of
    the outputs asked for and the input opened with the run's transforms; :meth:`write` computes and writes it."""

    run_dir: Path
    predictor: RunPredictor
    job: ChunkPredictor
    source: PredictInput

    def write(self, out: str | Path, *, overwrite: bool = False, backend: Backend | None = None,
              progress: Callable[[int], None] = lambda rows: None) -> PredictSummary:
        """Predict every row of the input on ``backend`` (default: this process) into ``out`` (``.csv``,
        ``.parquet`` or ``.zarr``; written atomically, an existing one replaced only with ``overwrite``),
        calling ``progress`` with the rows written so far."""
        began = time.perf_counter()
        backend = backend or InProcess()
        unseen: dict[str, Counter] = {}
        columns: list[str] = []
        dropped = 0
        with open_output(Path(out), overwrite) as writer:
            window = CHUNKS_PER_WORKER * backend.n_workers
            for frame, chunk_unseen, chunk_dropped in backend.map_ordered(self.job, self.source.chunks(), window):
                writer.write(frame)
                dropped += chunk_dropped
                columns = columns or list(frame.columns)
                for column, counts in chunk_unseen.items():
                    unseen.setdefault(column, Counter()).update(counts)
                progress(writer.rows)
        return PredictSummary(str(self.run_dir), self.predictor.model, self.source.description, str(out), writer.rows,
                              columns, {column: dict(counts.most_common()) for column, counts in unseen.items()},
                              round(time.perf_counter() - began, 3), dropped)


def prepared(run_dir: str | Path, input: str | Path, *, sep: str | None = None, intervals: Sequence[float] = (),
             split: str = "all", latent: bool = False, quantiles: Sequence[float] = (), samples: int = 0,
             seed: int = 0, na: str | None = None) -> PredictJob:
    """Everything a prediction checks before it computes: the run (:func:`load_predictor`), the outputs asked for
    against its task, the input (opened with the run's transforms) and the draws it may hold; nothing is
    written and no cluster is needed (``pep predict`` calls it before its backend starts).

    Args:
        run_dir: a run directory (``pep train``).
        input: a CSV or Parquet table with the run's feature (and id) columns, or a pep store.
        sep: the CSV input's field separator (default ``,``).
        intervals: regression: the levels of the predictive intervals to add (e.g. 0.9).
        split: a store input's split: ``all``, ``train`` or ``test``.
        latent, quantiles, samples, seed: the further columns of :class:`Outputs`.
        na: a row with a missing value: ``fail``, ``drop`` (left out, counted in ``dropped``) or ``mean``
            (:func:`load_predictor`).

    Raises:
        InputError: bad options or input.
    """
    predictor = load_predictor(Path(run_dir), na)
    job = ChunkPredictor(predictor, check_outputs(Outputs(tuple(intervals), latent, tuple(quantiles), samples, seed),
                                                  predictor.task, predictor.per_target))
    source = open_input(Path(input), predictor.transforms, sep, split)
    check_samples(job.outputs.samples, source)
    clash = set(predictor.transforms.id_columns) & set(prediction_columns(predictor.transforms, job.outputs,
                                                                         predictor.latent_per_class,
                                                                         predictor.per_target))
    if clash:
        raise InputError(f"{run_dir}: id column {sorted(clash)[0]!r} has the name of an output column; rename it "
                         "in the table and ingest it again")
    return PredictJob(Path(run_dir), predictor, job, source)


def predict(run_dir: str | Path, input: str | Path, out: str | Path, *, overwrite: bool = False,
            backend: Backend | None = None, progress: Callable[[int], None] = lambda rows: None,
            **options: Any) -> PredictSummary:
    """Predict every row of ``input`` with the run in ``run_dir`` and write the predictions to ``out``:
    :func:`prepared` (``options``: its keyword arguments), then :meth:`PredictJob.write`.

    Raises:
        InputError: bad options or input (nothing is written).
    """
    return prepared(run_dir, input, **options).write(out, overwrite=overwrite, backend=backend, progress=progress)


def unseen_warning(unseen: dict[str, dict[str, int]], shown: int = 3) -> str | None:
    """One line about text values never seen at ingest (their rows got all-zero one-hot columns)."""
    if not unseen:
        return None
    parts = []
    for column, counts in unseen.items():
        values = ", ".join(repr(v) for v in list(counts)[:shown]) + (", …" if len(counts) > shown else "")
        parts.append(f"column {column!r}: {sum(counts.values()):,} rows hold values never seen in training ({values})")
    return "; ".join(parts) + "; their one-hot columns are all 0"
