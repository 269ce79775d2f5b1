"""Run directories as models: the model a checkpoint was trained with, its newest intact checkpoint, and
held-out metrics of a run on a store."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import numpy as np

from ...core import float64
from ..data.blocks import BlockSource, TargetScaling
from ..data.stores import Store, feature_order, open_store
from ..data.transforms import Transforms, read_transforms
from ..engine import Backend, Engine, InProcess
from ..errors import InputError
from ..metrics import finish
from ..models import HeldOut, ModelSpec, get_model, model_settings
from . import checkpoint
from .manifest import RunManifest
from .validation import check_fields, check_finite


def check_parameterisation(manifest: RunManifest, spec: ModelSpec) -> None:
    """InputError unless the run stores ``spec``'s model as this pep does (its ``parameterisation`` tag)."""
    if manifest.parameterisation != spec.parameterisation:
        raise InputError(f"--model {spec.name}: the run stores parameterisation {manifest.parameterisation!r}; this "
                         f"version of pep reads {spec.parameterisation!r} (retrain, or use the pep version that wrote it)")


def bound_model(manifest: RunManifest) -> tuple[ModelSpec, Any, Any]:
    """``(spec, settings, model)`` of a checkpoint, bound to its training data as when it trained.

    Raises:
        InputError: the run stores its model in another parameterisation than this pep reads.
    """
    spec = get_model(manifest.model)
    check_parameterisation(manifest, spec)
    values = manifest.config.model if manifest.model_settings is None else manifest.model_settings  # M capped
    settings = model_settings(spec, values, "the run's config")
    return spec, settings, spec.build(settings, manifest.model_binding)


SAMPLE_VALUES = 2**20
"""The most values of the sample rows a checkpoint's templates are built from (``num_inducing × D``, 8 MiB)
that need no more checking: a model that keeps no inducing inputs among its params (a plugin's) stores
fewer values than that sample."""


def check_stored_size(raw: dict[str, Any], manifest: RunManifest, settings: Any) -> None:
    """ValueError (a damaged checkpoint) unless the params the manifest's settings ask for fit what the
    checkpoint stores: a model's ``num_inducing`` inducing inputs in D dimensions are among its params, so a
    manifest claiming more than the checkpoint holds, and more than :data:`SAMPLE_VALUES` (``num_inducing =
    4e9``: 149 GiB), is refused before anything is sized by it. The stored leaves are themselves bounded
    (:data:`~pep_gp.pipeline.runs.checkpoint.MAX_CHECKPOINT_BYTES`)."""
    stored = sum(math.prod(entry["shape"]) for entry in raw["leaves"].get("params", []))
    needed = settings.num_inducing * len(manifest.x_mean)
    if needed > max(stored, SAMPLE_VALUES):
        field = "config.model" if manifest.model_settings is None else "model_settings"
        raise ValueError(f"manifest field '{field}.num_inducing': {settings.num_inducing:,} inducing inputs in "
                         f"{len(manifest.x_mean)} dimensions, more than the {stored:,} parameter values the "
                         "checkpoint stores")


def resumed_config(run_dir: Path) -> dict[str, Any] | None:
    """The training config of the newest checkpoint of ``run_dir`` with a valid manifest (what
    ``pep train --resume`` continues with when no ``--config`` is given), or None."""
    manifest = checkpoint.newest_manifest(run_dir, RunManifest.of)
    return None if manifest is None else RunManifest.of(manifest).config.model_dump()


@dataclass(frozen=True)
class Run:
    """A run directory opened once: its newest intact checkpoint, the validated manifest and the model
    bound as it trained. What ``pep evaluate``, ``pep predict`` and :func:`pep_gp.load` read a run as, so
    that each reads the checkpoint and builds the model once, and all of them read it the same way.

    Attributes:
        directory: the run directory.
        restored: the checkpoint (its step, params and path).
        manifest: its validated run fields.
        spec, settings, model: the model as it trained (:func:`bound_model`).
        transforms: how a table's rows became the run's features (None in a manifest of an older pep).
    """

    directory: Path
    restored: checkpoint.Restored = field(repr=False)
    manifest: RunManifest = field(repr=False)
    spec: ModelSpec = field(repr=False)
    settings: Any = field(repr=False)
    model: Any = field(repr=False)
    transforms: Transforms | None = field(repr=False)

    @classmethod
    def open(cls, directory: str | Path) -> "Run":
        """The newest intact checkpoint of a run (a damaged one is skipped,
        :func:`~pep_gp.pipeline.runs.checkpoint.restore`), once its manifest's fields agree with each other
        and with the model and its params are finite (:mod:`~pep_gp.pipeline.runs.validation`).

        Raises:
            InputError: no complete checkpoint, an invalid ``transforms`` record, fields that disagree, or
                params that hold a NaN or an infinity (each naming the checkpoint and the field).
        """
        directory, built = Path(directory), {}

        def templates(raw: dict[str, Any]) -> dict[str, Any]:
            manifest = RunManifest.of(raw)
            spec, settings, model = bound_model(manifest)
            check_stored_size(raw, manifest, settings)
            built.update(manifest=manifest, spec=spec, settings=settings, model=model)  # the last is restored
            with float64():  # any params of the right shapes: M inducing inputs in D dimensions
                return {"params": spec.init(model, np.zeros((settings.num_inducing, len(manifest.x_mean))),
                                            settings, 0)}

        restored = checkpoint.restore(directory, templates)
        if restored is None:
            raise InputError(f"{directory}: no complete checkpoint (train first with `pep train`)")
        record = built["manifest"].transforms
        transforms = None if record is None else read_transforms(record, str(restored.path))
        check_fields(restored.path, built["manifest"], built["spec"], transforms)
        check_finite(restored.path, restored.trees["params"])
        return cls(directory, restored, transforms=transforms, **built)

    @property
    def params(self) -> Any:
        """The checkpoint's params (finite)."""
        return self.restored.trees["params"]

    @property
    def targets(self) -> TargetScaling:
        """Stored targets → model units, as the run trained."""
        return TargetScaling(self.manifest.targets.shift, self.manifest.targets.scale)

    def store_columns(self, store: Store) -> tuple[int, ...] | None:
        """Where the run's features are among ``store``'s columns, matched by name
        (:func:`~pep_gp.pipeline.data.stores.feature_order`; a manifest without feature names, from an older
        pep, is matched by count).

        Raises:
            InputError: the store holds other features, naming the missing and extra ones.
        """
        transforms = self.transforms
        if transforms is not None:
            return feature_order(store, transforms.feature_names)
        if len(store.feature_names) != len(self.manifest.x_mean):
            raise InputError(f"{store.path}: has {len(store.feature_names)} features; the model of "
                             f"{self.directory} was trained on {len(self.manifest.x_mean)}")
        return None


def load_run(run_dir: Path) -> checkpoint.Restored:
    """The newest intact checkpoint of a run, with its params (InputError if it has none)."""
    return Run.open(run_dir).restored


def training_store(run_dir: Path, manifest: RunManifest) -> Store:
    """The store a run was trained on, as its manifest names it: a local path only (a run directory
    received from elsewhere must not choose what this machine fetches: give a URL with ``--data``), and
    still holding the data the run trained on (same checksum).

    Raises:
        InputError: the manifest names a URL, or the store there is missing, invalid or other data.
    """
    if "://" in manifest.data:
        raise InputError(f"{run_dir}: the run was trained on {manifest.data}, a URL; pep evaluate reads a URL "
                         "only when you give it: pass --data")
    store = open_store(manifest.data)
    if store.checksum != manifest.dataset_checksum:
        raise InputError(f"{store.path}: no longer the data {run_dir} was trained on (checksum {store.checksum}, "
                         f"the run's {manifest.dataset_checksum}); pass --data to evaluate on it anyway")
    return store


def opened(run: Run | Path) -> Run:
    """``run`` itself, or the run directory ``run`` opened (:meth:`Run.open`): a caller that opened it already
    (``pep evaluate``, before its backend starts) passes it on, and nothing is read twice."""
    return run if isinstance(run, Run) else Run.open(Path(run))


def evaluate_table(run_dir: Run | Path, table: str | Path, target: str | None = None, sep: str | None = None,
                   backend: Backend | None = None) -> dict[str, Any]:
    """Held-out metrics of the newest checkpoint of ``run_dir`` (a directory, or a :class:`Run` opened) on a
    labelled CSV or Parquet table: its
    columns checked and read as ``pep predict --input`` reads them
    (:func:`~pep_gp.pipeline.data.predictions.open_input`), made into features by the run's transformation,
    its ``target`` column (default: the run's) encoded with the run's labels, and scored block by block as
    :func:`evaluate` scores a store's test split. A row without a target value is left out and counted
    (``rows_dropped``); a text value never seen at ingest gets all-zero one-hot columns, as in ``pep predict``,
    and is counted (``unseen``).

    Raises:
        InputError: a missing column, a label that is not one of the run's classes (naming it), a run without
            a ``transforms`` record or without a held-out evaluation.
    """
    from ..data.datasets import ArrayBlocks
    from ..data.predictions import open_input
    from ..data.table_scan import rows_to_keep

    run = opened(run_dir)
    predictive = run.spec.predictive(run.model, run.targets)
    if predictive is None or run.transforms is None:
        raise InputError(f"{run.directory}: --model {run.spec.name} has no held-out evaluation" if predictive is None else
                         f"{run.restored.path}: manifest has no 'transforms' (written by an older pep); train the run again")
    if target is not None and isinstance(run.transforms.target, tuple):
        raise InputError(f"--target: {run.directory} scores each of its targets "
                         f"({', '.join(run.transforms.target)}); leave --target out")
    target = target or run.transforms.target
    labelled = run.transforms.model_copy(update={"target": target})
    rows = open_input(Path(table), run.transforms, sep, target=target)
    engine_backend, held_out = backend or InProcess(), HeldOut(predictive, run.targets, calibration=True)
    block_rows, x_mean, x_std = run.manifest.config.rows_per_block, run.manifest.x_mean, run.manifest.x_std
    total, dropped, unseen = None, 0, {}
    for chunk in rows.chunks():
        keep, _ = rows_to_keep(chunk, list(labelled.target_columns), "drop")
        dropped += int((~keep).sum())
        kept = chunk.subset(keep)
        if not len(kept.frame):
            continue
        x, y = run.transforms.apply(kept, unseen), labelled.encode_labels(kept)
        source = ArrayBlocks(x, y, block_rows, tuple(x_mean), tuple(x_std), run.targets)
        sums = Engine(engine_backend, source).map_sum(held_out, run.params, range(source.n_blocks))
        total = sums if total is None else jax.tree_util.tree_map(np.add, total, sums)
    if total is None:
        raise InputError(f"{table}: no row with a value in column {target!r} to evaluate on")
    return {**finish(total), "rows_dropped": dropped, "unseen": {c: dict(n.most_common()) for c, n in unseen.items()},
            **scored(run, str(table), f"sha256:{file_digest(Path(table))}")}


def evaluate(run_dir: Run | Path, data: str | Path | None = None, backend: Backend | None = None) -> dict[str, Any]:
    """Held-out metrics of the newest checkpoint of ``run_dir`` (a directory, or a :class:`Run` opened) on the
    test split of ``data`` (by
    default the store it was trained on, :func:`training_store`), its features matched to the run's by
    name, moved to the run's offsets (another store of the same table centres its columns by its own,
    :meth:`~pep_gp.pipeline.data.transforms.Transforms.shift_from`) and standardised with the training
    statistics of the run. The same pass over the blocks gives the calibration report
    (:func:`~pep_gp.pipeline.metrics.finish`: Brier score, ECE and reliability bins, or CRPS and interval
    coverage).

    Raises:
        InputError: a store of other features (naming the missing and extra ones), or a model without a
            held-out evaluation.
    """
    run = opened(run_dir)
    store = open_store(data) if data is not None else training_store(run.directory, run.manifest)
    run.spec.check(store, run.settings, run.manifest.config.rows_per_block)
    columns = run.store_columns(store)
    predictive = run.spec.predictive(run.model, run.targets)
    if predictive is None:
        raise InputError(f"{run.directory}: --model {run.spec.name} has no held-out evaluation")
    shift = 0.0 if run.transforms is None else run.transforms.shift_from(store.transforms)
    source = BlockSource.of(store, "test", run.manifest.config.rows_per_block, run.targets, columns=columns,
                            statistics={"x_mean": np.asarray(run.manifest.x_mean) - shift, "x_std": run.manifest.x_std})
    engine = Engine(backend or InProcess(), source)
    sums = engine.map_sum(HeldOut(predictive, run.targets, calibration=True), run.params, range(source.n_blocks))
    return {**finish(sums), **scored(run, store.path, store.checksum)}


def scored(run: Run, data: str, checksum: str) -> dict[str, Any]:
    """What an evaluation scored: the checkpoint (``step``, ``checkpoint``), the data (``scored_data``, its
    ``scored_checksum``) and whether that is the data the run trained on (``training_data``: the same
    checksum), which decides where ``pep evaluate`` records it (:mod:`pep_gp.flows.reports`)."""
    return {"step": run.restored.step, "checkpoint": str(run.restored.path), "scored_data": data,
            "scored_checksum": checksum, "training_data": checksum == run.manifest.dataset_checksum}


def file_digest(path: Path) -> str:
    """The SHA-256 of a file's bytes, read a block at a time."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()
