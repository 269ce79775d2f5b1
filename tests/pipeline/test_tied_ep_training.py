"""tied-ep-classifier (EP or QP site updates with one tied factor) through the trainer: both projections
learn, from the same start QP's held-out predictions stay close to EP's, and bad settings are refused.
Bit-identity across workers and resumption: tests/pipeline/test_distributed.py,
tests/pipeline/test_multiclass_training.py and tests/flows/test_train_cli.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pep_gp.pipeline.errors import InputError
from pep_gp.pipeline.engine import InProcess
from pep_gp.pipeline.training.trainer import Trainer
from tests.pipeline.test_multiclass_training import job

MODEL = "tied-ep-classifier"


@pytest.mark.exhaustive
@pytest.mark.slow
def test_ep_and_qp_sites_learn_the_binary_store(binary_store, tmp_path):
    counts = np.asarray(binary_store.attrs["class_counts"]["test"], float)
    frequencies_nll = -np.sum(counts * np.log(counts / counts.sum())) / counts.sum()
    final = {}
    for projection in ("kl", "wasserstein"):
        trainer = Trainer(job(binary_store, tmp_path / projection, MODEL, {"projection": projection}, epochs=4),
                          InProcess())
        before = trainer.evaluate(trainer.fresh_state().params)
        result = trainer.run()
        final[projection] = result.history[-1]
        assert before["test_nll"] == pytest.approx(math.log(2), abs=0.05)  # q = prior: p = ½
        assert final[projection]["test_nll"] < 0.5 * frequencies_nll and final[projection]["test_error"] < 0.1
        assert result.rejected_steps == 0 and final[projection]["rejected_site_updates"] == 0
    assert final["wasserstein"]["test_nll"] != final["kl"]["test_nll"]  # the projection is used
    assert final["wasserstein"]["test_nll"] == pytest.approx(final["kl"]["test_nll"], rel=0.05)


def test_stores_and_settings_that_do_not_fit_are_refused(binary_store, three_class_store, tmp_path):
    with pytest.raises(InputError, match="is binary and needs 2 classes; this store has 3"):
        Trainer(job(three_class_store, tmp_path, MODEL), InProcess())
    with pytest.raises(InputError, match=r"invalid settings of --model tied-ep-classifier: model.projection: "
                                         r"Input should be 'kl' or 'wasserstein' \(found 'hellinger'\)"):
        Trainer(job(binary_store, tmp_path, MODEL, {"projection": "hellinger"}), InProcess())
    assert not (tmp_path / "checkpoints").exists()
