"""Every registered model (``MODELS``) end to end: initialisation, one compiled step, masked rows adding exactly
zero, a checkpoint round trip, resume, and its estimator's fit and predict. A model added to the registry is
tested here without a line of its own (a registry entry that breaks any of these fails).

Each model runs at the smallest shapes, compiling each program once (the heavy tier)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pep_gp.core import float64
from pep_gp.pipeline.estimators.models import ESTIMATORS
from pep_gp.pipeline.models import MODELS
from pep_gp.pipeline.runs.config import TrainConfig
from pep_gp.pipeline.runs.run import load_run
from pep_gp.pipeline.training.trainer import Trainer, TrainJob, train
from pep_gp.pipeline.engine import InProcess
from tests.trainstores import PAIRWISE, leaves_equal, make_store

# the multi-class deep GP without a hidden layer (its hidden layer: tests/core, test_distributed, test_train_cli)
SETTINGS = {"deep-gp": {"num_inducing": 5, "hidden_dims": [2]}, "deep-gp-classifier": {"num_inducing": 5, "hidden_dims": [2]},
            "deep-gp-multiclass": {"num_inducing": 5, "hidden_dims": []},
            **{name: {"num_inducing": 5, **PAIRWISE} for name in ("multiclass-sep", "multiclass-direct")}}
# (the softmax goes end to end through pep train in tests/pipeline/test_likelihood_estimators.py)
BATCH = {"multi-output-regressor": 256}  # one batch of every training row, in one block (half the batch holds them)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("model-stores")
    return {"binary": make_store(root / "binary.zarr", n_rows=150),
            "multiclass": make_store(root / "multi.zarr", n_rows=150, n_classes=3),
            "regression": make_store(root / "regression.zarr", task="regression", n_rows=150)}


def _store(stores, spec):
    if spec.task == "regression":
        return stores["regression"]
    return stores["binary"] if spec.n_classes == 2 else stores["multiclass"]


def _config(name, **kw):
    batch = BATCH.get(name, 64)
    return TrainConfig(model=SETTINGS.get(name, {"num_inducing": 5}), batch_size=batch, block_rows=batch // 2,
                       learning_rate=0.05, max_steps=6, tol=0, checkpoint_every=2, keep_checkpoints=2, **kw)


def _block_term(trainer, rows: slice = slice(None)):
    """The block energy and its gradient at the fresh parameters, as one compiled function of (x, mask), for
    the first block's ``rows``."""
    with float64():
        params = trainer.fresh_state().params
        shared = trainer.model.step_shared(params, trainer.data_size)
    y = jnp.asarray(trainer.train.source.read(0).y[rows])
    term = jax.jit(jax.value_and_grad(trainer.model.data_energy, argnums=(0, 1)))

    def at(x, mask):
        with float64():
            return term(params, shared, jnp.asarray(x), y, jnp.asarray(mask))
    return at


@pytest.mark.exhaustive
@pytest.mark.heavy
@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_registered_model_end_to_end_at_tiny_sizes(name, stores, tmp_path):
    spec = MODELS[name]
    store = _store(stores, spec)
    # blocks of the whole batch, as the estimator below makes them: each program compiles for one shape
    config = _config(name).model_copy(update={"max_steps": 2, "checkpoint_every": 1, "block_rows": None})
    trainer = Trainer(TrainJob(name, store, config, None), InProcess())
    start = trainer.fresh_state()
    assert all(np.all(np.isfinite(leaf)) for leaf in jax.tree_util.tree_leaves(start.params))
    assert trainer.step(start) and np.isfinite(start.last_energy)
    assert not leaves_equal(start.params, trainer.fresh_state().params)  # the step moved the params

    # masked rows add exactly zero: whatever their inputs, nothing at all when every row is masked, and the
    # rows kept give what they give cut out of the block (to round-off: another shape is another program)
    block = trainer.train.source.read(0)
    half = block.mask.copy()
    half[len(half) // 2:] = False
    term = _block_term(trainer)
    kept, scrambled = term(block.x, half), term(np.where(half[:, None], block.x, 7.0), half)
    empty = term(block.x, np.zeros_like(half))
    assert leaves_equal(kept, scrambled)
    assert float(empty[0]) == 0.0 and all(not np.any(leaf) for leaf in jax.tree_util.tree_leaves(empty[1]))
    alone = _block_term(trainer, rows=slice(0, len(half) // 2))(block.x[: len(half) // 2], half[: len(half) // 2])
    np.testing.assert_allclose(float(kept[0]), float(alone[0]), rtol=1e-12)
    for a, b in zip(jax.tree_util.tree_leaves(kept[1]), jax.tree_util.tree_leaves(alone[1])):
        # the gradient through the other shape's program: up to 2e-9 relative (the regressor's factor, measured)
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-8, atol=1e-12)

    # a run cut after one step and resumed from its checkpoint ends bit-identical to an uninterrupted one
    whole = train(TrainJob(name, store, config, tmp_path / "whole"))
    assert whole.steps == 2 and leaves_equal(load_run(tmp_path / "whole").trees["params"], whole.params)
    train(TrainJob(name, store, config, tmp_path / "cut"), until_step=1)
    resumed = train(TrainJob(name, store, config, tmp_path / "cut"), resume=True)
    assert resumed.steps == 2 and leaves_equal(resumed.params, whole.params)

    # its estimator takes exactly the spec's settings, fits and predicts
    estimator = ESTIMATORS[name]
    assert estimator.spec is spec and set(spec.Settings.model_fields) <= set(estimator().get_params())
    x, y = (np.asarray(a[:]) for a in store.arrays("train"))
    settings = {k: v for k, v in config.model.items() if k in spec.Settings.model_fields}
    fitted = estimator(**settings, max_iter=2, tol=0, batch_size=config.batch_size,
                       learning_rate=config.learning_rate).fit(x.astype(float), y)
    assert fitted.n_iter_ == 2
    if spec.task == "classification":
        proba = fitted.predict_proba(x[:10].astype(float))
        assert proba.shape == (10, len(fitted.classes_)) and len(fitted.classes_) == len(np.unique(y))
        np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-12)
    else:
        assert np.all(np.isfinite(fitted.predict(x[:10].astype(float))))

    # its latent moments are those of its own joint draws (a deep GP's moment-matched pass has no joint
    # Gaussian to draw from, and refuses: predict_f's docstring)
    rows = x[:3].astype(float)
    if "deep" in spec.name or spec.name == "multi-output-regressor":  # the latter: no covariance across rows
        with pytest.raises(ValueError, match="no full covariance or joint draws|full_cov across rows is not available"):
            fitted.sample_f(rows)
        return
    mean, var = fitted.predict_f(rows)
    draws = fitted.sample_f(rows, n_samples=100_000, seed=0)
    assert draws.shape == (100_000, *mean.shape)
    assert np.all(np.abs(draws.mean(0) - mean) < 5 * np.sqrt(var / len(draws)))  # 5 Monte Carlo standard errors
    assert np.all(np.abs(draws.var(0) - var) < 5 * var * np.sqrt(2 / len(draws)))
