"""The deep GP's starting state is strongly typed float64, so the trainer's programs compiled for the first
step serve every later one (a weakly typed leaf comes back from Adam strongly typed and made every
program compile a second time)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from pep_gp.core.likelihoods import Gaussian
from pep_gp.core.models.deep_gp import DeepGP
from pep_gp.pipeline.data.datasets import ArrayData
from pep_gp.pipeline.engine import InProcess
from pep_gp.pipeline.models.deep_gp import REGRESSOR
from pep_gp.pipeline.runs.config import TrainConfig
from pep_gp.pipeline.training.trainer import Trainer, TrainJob

COMPILE_EVENT = "/jax/core/compile/jaxpr_to_mlir_module_duration"  # compiled or loaded from the persistent cache


def test_every_leaf_of_the_starting_state_is_strongly_typed_float64():
    x = np.random.default_rng(0).normal(size=(40, 3))
    for hidden, share in [((2,), False), ((3, 2), True)]:
        params = DeepGP(Gaussian()).init(x, hidden_dims=hidden, num_inducing=6, share_hypers=share)
        for path, leaf in jax.tree_util.tree_leaves_with_path(params):
            assert leaf.dtype == np.float64 and not leaf.weak_type, jax.tree_util.keystr(path)


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_each_program_of_a_deep_gp_fit_compiles_once():
    """Steps 2–6 of a fit through the trainer (as the estimators run it) compile nothing."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(60, 3))
    data = ArrayData(x, np.sin(x[:, 0]) + 0.1 * rng.normal(size=60), "regression")
    config = TrainConfig(model={"hidden_dims": [2], "num_inducing": 8}, batch_size=30, epochs=3,
                         learning_rate=0.01, seed=0)
    trainer = Trainer(TrainJob(REGRESSOR, data, config, None), InProcess())
    trainer.run(until_step=1)
    compiled = []
    listener = lambda event, duration, **kwargs: compiled.append(event) if event == COMPILE_EVENT else None
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        result = trainer.run(until_step=6)
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert result.steps == 6
    assert compiled == []
