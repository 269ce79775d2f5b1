"""Run directories as models: the model a checkpoint was trained with, its newest intact checkpoint, and
held-out metrics of a run on a store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ...core import float64
from ..data.blocks import BlockSource, TargetScaling
from ..data.stores import open_store
from ..engine import Backend, Engine, InProcess
from ..errors import InputError
from ..metrics import finish
from ..models import HeldOut, ModelSpec, get_model, model_settings
from . import checkpoint
from .config import TrainConfig


def check_parameterisation(manifest: dict[str, Any], spec: ModelSpec) -> None:
    """InputError unless the run stores ``spec``'s model as this pep does (its ``parameterisation`` tag)."""
    found = manifest.get("parameterisation", "1")  # runs written before the tag existed
    if found != spec.parameterisation:
        raise InputError(f"--model {spec.name}: the run stores parameterisation {found!r}; this version of pep "
                         f"reads {spec.parameterisation!r} (retrain, or use the pep version that wrote it)")


def bound_model(manifest: dict[str, Any]) -> tuple[ModelSpec, Any, Any]:
    """``(spec, settings, model)`` of a checkpoint, bound to its training data as when it trained.

    Raises:
        InputError: the run stores its model in another parameterisation than this pep reads.
    """
    spec = get_model(manifest["model"])
    check_parameterisation(manifest, spec)
    values = manifest.get("model_settings", TrainConfig(**manifest["config"]).model)  # as trained (M capped)
    settings = model_settings(spec, values, "the run's config")
    return spec, settings, spec.build(settings, manifest.get("model_binding", {}))


def load_run(run_dir: Path) -> checkpoint.Restored:
    """The newest intact checkpoint of a run, with its params (InputError if it has none)."""

    def templates(manifest: dict[str, Any]) -> dict[str, Any]:
        spec, settings, model = bound_model(manifest)
        n_features = len(manifest["x_mean"])
        with float64():  # any params of the right shapes: M inducing inputs in D dimensions
            return {"params": spec.init(model, np.zeros((settings.num_inducing, n_features)), settings, 0)}

    restored = checkpoint.restore(run_dir, templates)
    if restored is None:
        raise InputError(f"{run_dir}: no complete checkpoint (train first with `pep train`)")
    return restored


def evaluate(run_dir: Path, data: str | Path | None = None, backend: Backend | None = None) -> dict[str, Any]:
    """Held-out metrics of the newest checkpoint of ``run_dir`` on the test split of ``data`` (by
    default the store it was trained on), standardised with the training statistics of the run."""
    restored = load_run(run_dir)
    manifest = restored.meta
    store = open_store(data if data is not None else manifest["data"])
    spec, settings, model = bound_model(manifest)
    config = TrainConfig(**manifest["config"])
    spec.check(store, settings, config.rows_per_block)
    if len(store.feature_names) != len(manifest["x_mean"]):
        raise InputError(f"{store.path}: has {len(store.feature_names)} features; the model of "
                         f"{run_dir} was trained on {len(manifest['x_mean'])}")
    targets = TargetScaling(**manifest["targets"])
    predictive = spec.predictive(model, targets)
    if predictive is None:
        raise InputError(f"{run_dir}: --model {spec.name} has no held-out evaluation")
    held_out = HeldOut(predictive, targets)
    source = BlockSource(store.path, "test", store.n_rows("test"), config.rows_per_block,
                         tuple(manifest["x_mean"]), tuple(manifest["x_std"]), targets)
    engine = Engine(backend or InProcess(), source)
    sums = engine.map_sum(held_out, restored.trees["params"], range(source.n_blocks))
    return {**finish(sums), "step": restored.step, "checkpoint": str(restored.path)}
