"""Issue 62, item 3: one check of a run directory for every reader. :func:`pep_gp.load` trusted what
``pep predict`` refused: a checkpoint whose params hold a NaN (its digests consistent) loaded and predicted
NaN for every row, and manifests whose fields contradict each other loaded (three labels on a binary
model, ``x_std = 1e-300``, more means than transforms). Now :meth:`Run.open` refuses each, in one line
naming the field, for ``pep_gp.load``, ``pep predict`` (:func:`load_predictor`) and ``pep evaluate``."""

from __future__ import annotations

import json
import warnings

import jax
import numpy as np
import pytest

import pep_gp
from pep_gp.pipeline.errors import InputError
from pep_gp.pipeline.runs import checkpoint
from pep_gp.pipeline.runs.predict import load_predictor
from pep_gp.pipeline.runs.run import evaluate, load_run
from pep_gp.pipeline.training.trainer import TrainJob, train
from tests.trainstores import FAST

SHORT = FAST.model_copy(update={"epochs": 1, "checkpoint_every": 100})  # 5 steps, one checkpoint
READERS = {"pep_gp.load": pep_gp.load, "pep predict": load_predictor, "pep evaluate": evaluate}


@pytest.fixture(scope="module")
def trained(tmp_path_factory, binary_store):
    run_dir = tmp_path_factory.mktemp("validation") / "run"
    train(TrainJob("sparse-gp-classifier", binary_store, SHORT, run_dir))
    return run_dir


def rewritten(trained, tmp_path, edit=lambda manifest: None, params=lambda leaves: None):
    """A copy of the trained run, its one checkpoint written again (digests consistent) with its manifest's
    run fields edited by ``edit`` and its params' leaves by ``params``."""
    restored = load_run(trained)
    leaves, tree = jax.tree_util.tree_flatten(jax.tree_util.tree_map(np.array, restored.trees["params"]))
    params(leaves)
    meta = {key: value for key, value in restored.meta.items() if key not in ("format", "step", "leaves")}
    meta = json.loads(json.dumps(meta))
    edit(meta)
    checkpoint.save(tmp_path / "run", restored.step, {"params": tree.unflatten(leaves)}, meta, keep=1)
    return tmp_path / "run"


def refused(run_dir, reader, match):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", checkpoint.CheckpointWarning)
        with pytest.raises(InputError, match=match) as raised:
            READERS[reader](run_dir)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("reader", READERS)
def test_nan_params_are_refused_by_every_reader(trained, tmp_path, reader):
    run_dir = rewritten(trained, tmp_path, params=lambda leaves: leaves[-1].flat.__setitem__(0, np.nan))
    refused(run_dir, reader, r"step-00000005: parameter .* holds 1 non-finite values")


def _three_labels(manifest):
    manifest["transforms"]["labels"] = [0, 1, 2]


def _tiny_scale(manifest):
    manifest["x_std"][1] = 1e-300


def _huge_scale(manifest):
    manifest["x_std"][0] = 1e200


def _more_means_than_transforms(manifest):
    manifest["transforms"]["features"].pop()


def _three_classes(manifest):
    manifest["classes"] = ["a", "b", "c"]


CONTRADICTIONS = {
    _three_labels: r"manifest field 'transforms.labels': 3 labels; the model sparse-gp-classifier predicts 2 classes",
    _three_classes: r"manifest field 'classes': 3 labels; the model sparse-gp-classifier predicts 2 classes",
    _tiny_scale: r"manifest field 'x_std\[1\]': 1e-300, outside \[1.49e-154, 1.34e\+154\]",
    _huge_scale: r"manifest field 'x_std\[0\]': 1e\+200, outside \[1.49e-154, 1.34e\+154\]",
    _more_means_than_transforms: r"manifest field 'x_mean': 3 values; 'transforms' makes 2 features",
}


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("edit", CONTRADICTIONS, ids=lambda edit: edit.__name__.strip("_"))
def test_contradicting_manifest_fields_are_refused_by_every_reader(trained, tmp_path, edit, reader):
    refused(rewritten(trained, tmp_path, edit), reader, CONTRADICTIONS[edit])


def test_the_untouched_run_loads(trained, tmp_path):
    """The oracle of the cases above: the same rewrite without an edit loads and predicts finite
    probabilities for both of its two labels."""
    estimator = pep_gp.load(rewritten(trained, tmp_path))
    proba = estimator.predict_proba(np.zeros((4, 3)))
    assert list(estimator.classes_) == [0, 1] and proba.shape == (4, 2) and np.isfinite(proba).all()
