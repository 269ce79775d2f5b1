"""Run directories as models: the model a checkpoint was trained with, its newest intact checkpoint, and
held-out metrics of a run on a store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ...core import float64
from ..data.blocks import BlockSource, TargetScaling
from ..data.stores import Store, open_store
from ..data.transforms import read_transforms
from ..engine import Backend, Engine, InProcess
from ..errors import InputError
from ..metrics import finish
from ..models import HeldOut, ModelSpec, get_model, model_settings
from . import checkpoint
from .manifest import RunManifest


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


def resumed_config(run_dir: Path) -> dict[str, Any] | None:
    """The training config of the newest checkpoint of ``run_dir`` with a valid manifest (what
    ``pep train --resume`` continues with when no ``--config`` is given), or None."""
    manifest = checkpoint.newest_manifest(run_dir, RunManifest.of)
    return None if manifest is None else RunManifest.of(manifest).config.model_dump()


def load_run(run_dir: Path) -> checkpoint.Restored:
    """The newest intact checkpoint of a run, with its params (InputError if it has none)."""

    def templates(raw: dict[str, Any]) -> dict[str, Any]:
        manifest = RunManifest.of(raw)
        spec, settings, model = bound_model(manifest)
        n_features = len(manifest.x_mean)
        with float64():  # any params of the right shapes: M inducing inputs in D dimensions
            return {"params": spec.init(model, np.zeros((settings.num_inducing, n_features)), settings, 0)}

    restored = checkpoint.restore(run_dir, templates)
    if restored is None:
        raise InputError(f"{run_dir}: no complete checkpoint (train first with `pep train`)")
    return restored


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


def evaluate(run_dir: Path, data: str | Path | None = None, backend: Backend | None = None) -> dict[str, Any]:
    """Held-out metrics of the newest checkpoint of ``run_dir`` on the test split of ``data`` (by
    default the store it was trained on, :func:`training_store`), standardised with the training
    statistics of the run (after moving the rows of another store to the run's offsets,
    :meth:`~pep_gp.pipeline.data.transforms.Transforms.shift_from`)."""
    restored = load_run(run_dir)
    manifest = RunManifest.of(restored.meta)
    store = open_store(data) if data is not None else training_store(run_dir, manifest)
    spec, settings, model = bound_model(manifest)
    spec.check(store, settings, manifest.config.rows_per_block)
    if len(store.feature_names) != len(manifest.x_mean):
        raise InputError(f"{store.path}: has {len(store.feature_names)} features; the model of "
                         f"{run_dir} was trained on {len(manifest.x_mean)}")
    targets = TargetScaling(manifest.targets.shift, manifest.targets.scale)
    predictive = spec.predictive(model, targets)
    if predictive is None:
        raise InputError(f"{run_dir}: --model {spec.name} has no held-out evaluation")
    held_out = HeldOut(predictive, targets)
    # Another store of the same table centres its columns by its own offsets: move its rows to the run's.
    shift = (0.0 if manifest.transforms is None
             else read_transforms(manifest.transforms, str(restored.path)).shift_from(store.transforms))
    source = BlockSource.of(store, "test", manifest.config.rows_per_block, targets,
                            statistics={"x_mean": np.asarray(manifest.x_mean) - shift, "x_std": manifest.x_std})
    engine = Engine(backend or InProcess(), source)
    sums = engine.map_sum(held_out, restored.trees["params"], range(source.n_blocks))
    return {**finish(sums), "step": restored.step, "checkpoint": str(restored.path)}
