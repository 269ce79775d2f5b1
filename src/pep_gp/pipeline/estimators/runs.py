"""Runs are models: any run directory — written by ``pep train`` or by ``estimator.save(dir)``
(:meth:`~pep_gp.pipeline.estimators.base.GPEstimator.save`) — loads as the fitted estimator of its model
(:func:`load`), ready for ``predict``/``predict_proba``.

A run directory is the trainer's checkpoint format (:mod:`pep_gp.pipeline.runs.checkpoint`): Zarr
arrays with their digests and a JSON manifest (format version, the model's name and parameterisation tag,
its settings, the input standardisation, the target scaling and the class labels) — never a pickle. A run
of another format version or parameterisation is refused, naming what was found and what was expected.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np

from ..models import model_settings
from ..runs.growth import Frame
from ..runs.run import Run
from . import models  # noqa: F401  (defines the built-in estimators, which add themselves to ESTIMATORS)
from .base import GPEstimator, estimator_for
from .stores import table_reading


def load(run_dir: str | Path) -> GPEstimator:
    """The fitted estimator of a run directory's newest intact checkpoint (``pep train`` or ``save``), of the
    class :func:`~pep_gp.pipeline.estimators.base.estimator_for` gives its model (a plugin model's own, or
    one made for it).

    Its parameters (``get_params``) are those the run was given, as the saved estimator's were
    (``likelihood="auto"`` stays ``"auto"``, ``num_inducing`` uncapped); its fitted model is the one that trained
    (what auto chose, M capped by the rows), which ``save`` and ``warm_start`` keep.

    ``log_marginal_likelihood_value_`` is the one the run's manifest records: that of the checkpoint which
    ended a ``pep train`` run, or of ``save``; NaN for a run cut short or written by an older pep.

    Raises:
        InputError: no complete checkpoint, an unregistered model, a run of another format version or
            parameterisation (the message names what was found and what this pep reads), manifest fields
            that disagree or params that are not finite (as ``pep predict`` refuses them,
            :mod:`~pep_gp.pipeline.runs.validation`).
    """
    run = Run.open(run_dir)
    restored, manifest, spec, settings, model = run.restored, run.manifest, run.spec, run.settings, run.model
    config = manifest.config
    asked = model_settings(spec, config.model, "the run's config")  # the parameters given, before M's cap and auto
    estimator = estimator_for(spec)(**asked.model_dump(), learning_rate=config.learning_rate, optimizer=config.optimizer,
                                      batch_size=config.batch_size, seed=config.seed, tol=config.tol,
                                      max_iter=config.max_steps if config.max_steps is not None else manifest.total_steps)
    fitted: dict[str, Any] = {
        "model_": model,
        "x_mean_": np.asarray(manifest.x_mean, float), "x_std_": np.asarray(manifest.x_std, float),
        "targets_": run.targets, "n_features_in_": len(manifest.x_mean),
        "binding_": manifest.model_binding, "data_checksum_": manifest.dataset_checksum,
        "_frame": Frame(list(manifest.x_mean), list(manifest.x_std), run.targets, manifest.model_binding,
                        settings.model_dump()),  # as trained: what save and warm_start keep
        "n_iter_": restored.step, "block_rows_": config.rows_per_block, "converged_": manifest.converged, "notes_": [],
        "n_rejected_steps_": manifest.rejected_steps, "n_rejected_site_updates_": manifest.rejected_site_updates,
        "log_marginal_likelihood_value_": np.nan if manifest.log_marginal_likelihood is None
        else manifest.log_marginal_likelihood}
    transforms = run.transforms
    if spec.task == "classification":
        labels = manifest.classes or (transforms.labels if transforms is not None else None)
        counts = manifest.model_binding.get("class_counts")
        fitted["classes_"] = np.asarray(labels or list(range(len(counts) if counts else 2)))
    names = manifest.feature_names or (None if transforms is None else list(transforms.feature_names))
    fitted.update(table_reading(transforms, names))
    for name, value in fitted.items():
        setattr(estimator, name, value)
    estimator._keep_params(jax.tree_util.tree_map(np.asarray, restored.trees["params"]))
    estimator._loaded(run)
    return estimator
