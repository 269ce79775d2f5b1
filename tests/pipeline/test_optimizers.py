"""``optimizer=`` (issue 65, item 8): an optax optimiser by name with its settings. ``"adam"`` is the Adam of
before to the bit; plain SGD's one step is ``θ + η·∇F`` (the energy's gradient by autodiff); a config's
``[optimizer]`` table and ``--set`` reach the run and ``pep_gp.load``; a bad name or setting is refused in one
line listing the choices."""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import pep_gp
from pep_gp import SparseGPClassifier, SparseGPRegressor
from pep_gp.core import float64
from pep_gp.pipeline.errors import InputError
from pep_gp.pipeline.optimizers import OPTIMIZERS, build_optimizer
from pep_gp.pipeline.runs.config import load_config, parse_settings
from pep_gp.pipeline.training.trainer import TrainJob, train
from tests.fits import fit


@pytest.fixture(scope="module")
def rows():
    rng = np.random.default_rng(7)
    x = rng.uniform(-2, 2, (40, 2))
    return x, (x[:, 0] + 0.5 * rng.normal(size=40) > 0).astype(int)


def test_adam_by_name_is_optax_adam_to_the_bit():
    params = {"a": jnp.array([0.3, -1.2]), "b": jnp.array(2.0)}
    grads = {"a": jnp.array([0.7, 0.01]), "b": jnp.array(-3.0)}
    with float64():
        for optimizer in (build_optimizer("adam", 0.05), build_optimizer({"name": "adam"}, 0.05)):
            ours, _ = optimizer.update(grads, optimizer.init(params), params)
            theirs, _ = optax.adam(0.05).update(grads, optax.adam(0.05).init(params), params)
            assert all(np.asarray(a).tobytes() == np.asarray(b).tobytes()
                       for a, b in zip(jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(theirs)))


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_one_sgd_step_moves_every_parameter_by_the_learning_rate_times_the_gradient(rows):
    x, y = rows
    settings = dict(num_inducing=4, solver="adam", learning_rate=0.01, optimizer={"name": "sgd"}, seed=1)
    start = fit(SparseGPClassifier(max_iter=0, **settings), x, y)
    stepped = fit(SparseGPClassifier(max_iter=1, **settings), x, y)
    with float64():
        standardised = jnp.asarray((x - start.x_mean_) / start.x_std_)
        params = jax.tree_util.tree_map(jnp.asarray, start.params_)
        grad = jax.grad(start.model_.energy)(params, standardised, jnp.asarray(y, float))
    expected = jax.tree_util.tree_map(lambda p, g: np.asarray(p) + 0.01 * np.asarray(g), start.params_, grad)
    for ours, theirs in zip(jax.tree_util.tree_leaves(stepped.params_), jax.tree_util.tree_leaves(expected)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-12)


@pytest.mark.heavy
def test_another_optimiser_changes_the_fit_and_adam_by_name_does_not(rows):
    x, y = rows
    settings = dict(num_inducing=4, solver="adam", max_iter=5, seed=1)
    default = fit(SparseGPClassifier(**settings), x, y)
    named = fit(SparseGPClassifier(optimizer={"name": "adam"}, **settings), x, y)
    other = fit(SparseGPClassifier(optimizer={"name": "sgd", "momentum": 0.9}, **settings), x, y)
    leaves = lambda model: np.concatenate([np.ravel(a) for a in jax.tree_util.tree_leaves(model.params_)])
    assert leaves(default).tobytes() == leaves(named).tobytes()
    assert not np.allclose(leaves(default), leaves(other))


@pytest.mark.parametrize("optimizer, words", [
    ("adamx", ["'adamx'", ", ".join(OPTIMIZERS)]),
    ({"name": "sgd", "beta1": 0.9}, ["'sgd'", "beta1", "momentum"]),
    ({"name": "adam", "learning_rate": 0.1}, ["learning_rate", "config's own field"]),
])
def test_a_bad_optimiser_is_refused_in_one_line(rows, optimizer, words):
    x, y = rows
    with pytest.raises(ValueError) as error:
        SparseGPRegressor(optimizer=optimizer).fit(x, y.astype(float))
    assert "\n" not in str(error.value) and all(word in str(error.value) for word in words), str(error.value)
    with pytest.raises(InputError, match="optimizer"):
        load_config(None, settings={"optimizer": optimizer})


def test_a_config_table_and_set_name_the_optimiser(tmp_path):
    path = tmp_path / "train.toml"
    path.write_text('[optimizer]\nname = "sgd"\nmomentum = 0.9\n')
    assert load_config(path).optimizer == {"name": "sgd", "momentum": 0.9}
    assert load_config(path, settings=parse_settings(["optimizer=adamw"])).optimizer == "adamw"
    assert load_config(None, {"optimizer": "adam"}, parse_settings(["optimizer.name=rmsprop"])).optimizer == {
        "name": "rmsprop"}


@pytest.mark.heavy
def test_a_run_records_its_optimiser_and_loads_with_it(regression_store, tmp_path):
    config = load_config(None, settings=parse_settings(["optimizer.name=adamw", "optimizer.weight_decay=0.001",
                                                        "model.num_inducing=4"]), max_steps=3, batch_size=1000)
    train(TrainJob("sparse-gp-regressor", regression_store, config, tmp_path / "run"))
    assert pep_gp.load(tmp_path / "run").optimizer == {"name": "adamw", "weight_decay": 0.001}
