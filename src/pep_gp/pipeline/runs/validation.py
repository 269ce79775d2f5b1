"""One check of a run directory's checkpoint before any reader uses it as a model (``pep predict``,
``pep evaluate`` and :func:`pep_gp.load` all open a run through :meth:`~pep_gp.pipeline.runs.run.Run.open`).

:class:`~pep_gp.pipeline.runs.manifest.RunManifest` checks each field alone; what is checked here is
what holds between them and the arrays, each failure one line naming the field:

* the feature scales ``x_std`` lie in :data:`SCALE_RANGE`, so that a standardised row ``(x − x_mean) /
  x_std`` and its squared distances (what a kernel computes) of unit-scale inputs are float64 numbers
  (``x_std = 1e-300`` made every row the same point);
* the features the ``transforms`` record (and ``feature_names``) make are as many as the means;
* the ``transforms`` record's task is the model's, and the class labels (``classes``,
  ``transforms.labels``) are as many as the classes the model predicts (:func:`model_classes`);
* the params hold no NaN or infinity (a run that diverged, or a file written so, digests consistent):
  such a checkpoint predicts nothing finite (:func:`check_finite`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import jax
import numpy as np

from ..data.transforms import Transforms
from ..errors import InputError
from ..models import ModelSpec
from .manifest import RunManifest

SCALE_RANGE = (math.sqrt(np.finfo(np.float64).tiny), math.sqrt(np.finfo(np.float64).max))
"""The feature scales a run may record, ``[√tiny, √max]`` of float64 (``[1.49e-154, 1.34e+154]``): the
square of a unit-scale input divided by one is a normal float64 number."""


def model_classes(spec: ModelSpec, binding: dict[str, Any]) -> int | None:
    """The classes a classifier predicts: a binary model's 2 (``spec.n_classes``), else one per training
    class count of its binding; None for a regressor (or a plugin model that declares neither)."""
    if spec.task != "classification":
        return None
    declared, counts = getattr(spec, "n_classes", None), binding.get("class_counts")
    return declared if declared is not None else (len(counts) if counts else None)


def check_fields(path: Path, manifest: RunManifest, spec: ModelSpec, transforms: Transforms | None) -> None:
    """InputError, naming the checkpoint ``path`` and the field, unless the manifest's fields agree with each
    other and with the model (see the module's list).

    Raises:
        InputError: the first field that disagrees.
    """
    def refuse(field: str, problem: str) -> None:
        raise InputError(f"{path}: manifest field '{field}': {problem} (the run directory was edited or "
                         "damaged; train again)")

    low, high = SCALE_RANGE
    for index, scale in enumerate(manifest.x_std):
        if not low <= scale <= high:
            refuse(f"x_std[{index}]", f"{scale:g}, outside [{low:.3g}, {high:.3g}], the feature scales a "
                                      "standardised row can be computed with in float64")
    dims = len(manifest.x_mean)
    for field, names in (("transforms", None if transforms is None else transforms.feature_names),
                         ("feature_names", manifest.feature_names)):
        if names is not None and len(names) != dims:
            refuse("x_mean", f"{dims} values; '{field}' makes {len(names)} features")
    if transforms is not None and transforms.task != spec.task:
        refuse("transforms.task", f"{transforms.task!r}; the model {spec.name} is a {spec.task} model")
    classes = model_classes(spec, manifest.model_binding)
    for field, labels in (("classes", manifest.classes), ("transforms.labels", transforms and transforms.labels)):
        if classes is not None and labels is not None and len(labels) != classes:
            refuse(field, f"{len(labels)} labels; the model {spec.name} predicts {classes} classes")


def check_finite(path: Path, params: Any) -> None:
    """InputError unless every parameter of the checkpoint at ``path`` is finite.

    Raises:
        InputError: naming the checkpoint and the first non-finite parameter.
    """
    for key_path, leaf in jax.tree_util.tree_leaves_with_path(params):
        values = np.asarray(leaf)
        if np.issubdtype(values.dtype, np.inexact) and not np.isfinite(values).all():
            raise InputError(f"{path}: parameter {jax.tree_util.keystr(key_path)} holds "
                             f"{np.count_nonzero(~np.isfinite(values))} non-finite values; the checkpoint "
                             "cannot predict (train again, or use an earlier checkpoint)")
