"""Compile once (issue 25): every program of a training step compiles once per process, and JAX's
persistent compilation cache lets a later process load them, with bit-identical results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import jax
import jax.monitoring
import jax.numpy as jnp
import numpy as np
import pytest

from pep_gp.pipeline.engine import InProcess
from pep_gp.pipeline.engine.compilation import (COMPILATION_CACHE_ENV, COMPILE_EVENT, compilation_cache_dir,
                                               use_compilation_cache)
from pep_gp.pipeline.errors import InputError
from pep_gp.pipeline.training.trainer import Trainer, TrainJob
from tests.trainstores import FAST, PAIRWISE, config_for

LOWERED = "/jax/core/compile/jaxpr_to_mlir_module_duration"
"""Recorded for every program JAX lowers for XLA, then compiles or loads from the persistent cache (the
tests share one): a cache hit records no backend compilation."""
ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def compiled_programs():
    """Collects the name of every program XLA compiles (or loads from the persistent cache) meanwhile."""
    names: Counter = Counter()

    def listener(event, seconds, **info):
        if event == LOWERED:
            names[info.get("fun_name", "?")] += 1

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield names
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)


@pytest.mark.exhaustive
@pytest.mark.parametrize("model, store", [("multiclass-sep", "three_class_store"),
                                          ("multiclass-direct", "three_class_store"),
                                          ("sparse-gp-classifier", "binary_store"),
                                          pytest.param("deep-gp", "regression_store", marks=pytest.mark.slow)])
@pytest.mark.heavy
def test_each_program_of_a_step_compiles_once(model, store, tmp_path, request):
    """The first step compiles each of its programs once (the coordinator's calls and the block
    functions; ``prepare``, which the blocks run too, at most once per process), the next steps (same shapes) compile nothing:
    the initial leaves are strongly typed like the optimiser's outputs (a weakly typed start made the
    multi-class step compile its large programs two or three times)."""
    config = config_for(model, FAST.model_copy(update={"learning_rate": 0.0421}))  # a step not compiled earlier
    trainer = Trainer(TrainJob(model, request.getfixturevalue(store), config, None), InProcess())
    state = trainer.fresh_state()
    assert trainer.schedule.steps_per_epoch == 5  # steps 0-3 hold two blocks each, step 4 one
    with compiled_programs() as first:
        trainer.step(state)
    with compiled_programs() as later:
        for _ in range(3):
            trainer.step(state)
    parts = trainer.step_fn.parts
    coordinator = {f"jit({parts.ascend.__name__})"} | ({"jit(site_update)"} if trainer.spec.has_sites else set())
    # compiled once per process, as the block programs (the blocks derive the step-shared quantities with it)
    blocks = {f"jit({fn.__name__})" for fn in (parts.prepare, parts.data_term, parts.site_term) if fn is not None}
    assert {name: first[name] for name in coordinator} == dict.fromkeys(coordinator, 1), dict(first)
    assert all(first[name] <= 1 for name in blocks), dict(first)  # (another test may have compiled them)
    assert not later, f"steps 2-4 compiled again: {dict(later)}"
    reseeded = Trainer(TrainJob(model, request.getfixturevalue(store), config.model_copy(update={"seed": 7}), None),
                       InProcess())  # another seed: other initial values and minibatch order, the same step
    other = reseeded.fresh_state()
    with compiled_programs() as again:
        reseeded.step(other)
    assert reseeded.step_fn is trainer.step_fn and not again, f"a new seed compiled again: {dict(again)}"


def test_the_direct_classifiers_factor_starts_in_one_program():
    """``chol(K_c⁻¹)`` of every class, where ``DirectMultiClassGPClassifier``'s Cholesky factors start, is one
    compiled program: op by op its array operations were 34 programs more, each compiled in every new process
    (1.2 s of a fit on glass)."""
    from pep_gp.core import float64
    from pep_gp.core.models.multiclass import MultiClassGP

    x = np.random.default_rng(0).normal(size=(37, 3))
    with float64(), compiled_programs() as names:
        params = MultiClassGP(4).init(x, 7, factor="cholesky")
    assert names["jit(_prior_precision_cholesky)"] == 1
    assert not {"jit(_factorise)", "jit(scan)", "jit(matmul)", "jit(swapaxes)"} & set(names), dict(names)
    assert params.factor.chol.shape == (4, 7, 7) and np.all(np.isfinite(params.factor.chol))


@pytest.mark.exhaustive
@pytest.mark.heavy
@pytest.mark.parametrize("name", ["MultiClassGPClassifier", "MultiClassEPClassifier"])
def test_folds_of_another_size_and_class_balance_share_the_compiled_programs(name):
    """A fit on fewer rows of another class balance, as the folds of a stratified cross-validation are,
    compiles nothing: the rows are padded to a few sizes (``sizes.bucket``) and the rows of each class, which
    the factor counts need, are an argument of the programs (``ModelSpec.data_size``), not a constant of the
    model."""
    import pep_gp

    x = np.random.default_rng(3).normal(size=(48, 2))
    balanced, skewed = np.arange(48) % 3, np.minimum(np.arange(40) // 12, 2)  # 16/16/16 and 12/12/16 rows
    estimator = getattr(pep_gp, name)
    settings = {"num_inducing": 4, "max_iter": 3, "tol": 0.0, **PAIRWISE}
    estimator(**settings).fit(x, balanced)
    with compiled_programs() as second:
        estimator(**settings).fit(x[:40], skewed)
    assert not second, f"another fold compiled again: {dict(second)}"


CHILD = """
import json, sys
import jax.monitoring, numpy as np
from pep_gp.pipeline.data.stores import open_store
from pep_gp.pipeline.engine import InProcess
from pep_gp.pipeline.training.trainer import Trainer, TrainJob
from tests.trainstores import config_for
hits = []
jax.monitoring.register_event_listener(lambda event, **_: hits.append(event) if event.endswith("cache_hits") else None)
trainer = Trainer(TrainJob("multiclass-sep", open_store(sys.argv[1]), config_for("multiclass-sep"), None), InProcess())
result = trainer.run(until_step=3)
leaves = [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(result.params)]
np.savez(sys.argv[2], *leaves)
print(json.dumps({"cache_hits": len(hits)}))
"""


def _train_in_a_new_process(store, out: Path, cache: str) -> dict:
    env = {**os.environ, COMPILATION_CACHE_ENV: cache}
    done = subprocess.run([sys.executable, "-c", CHILD, store.path, str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _leaves(path: Path) -> list[bytes]:
    with np.load(path) as saved:
        return [saved[key].tobytes() for key in sorted(saved.files, key=lambda k: int(k.split("_")[1]))]


@pytest.mark.heavy
def test_a_run_from_the_persistent_cache_is_bit_identical(three_class_store, tmp_path):
    """Two processes train the same 3 steps: the first compiles every program and fills the cache, the
    second loads them (cache hits) and ends with bit-identical parameters. (That ``off`` uses no cache is
    :func:`test_the_cache_directory_follows_the_environment`'s.)"""
    cache = tmp_path / "jax-cache"
    cold = _train_in_a_new_process(three_class_store, tmp_path / "cold.npz", str(cache))
    warm = _train_in_a_new_process(three_class_store, tmp_path / "warm.npz", str(cache))
    assert cold["cache_hits"] == 0 and warm["cache_hits"] >= 3 and any(cache.iterdir())
    assert _leaves(tmp_path / "warm.npz") == _leaves(tmp_path / "cold.npz")


FIT = """
import json, sys
import jax, jax.monitoring, numpy as np
import pep_gp
hits, programs = [], []
jax.monitoring.register_event_listener(lambda event, **_: hits.append(event) if event.endswith("cache_hits") else None)
jax.monitoring.register_event_duration_secs_listener(
    lambda event, *_, **info: programs.append(info["fun_name"]) if event == sys.argv[5] else None)
rng = np.random.default_rng(0)
x = rng.normal(size=(40, 2))
y = (x[:, 0] + 0.3 * rng.normal(size=40) > 0).astype(int) + (x[:, 1] > 1) * (sys.argv[4] == "multiclass")
model = getattr(pep_gp, sys.argv[2])(**json.loads(sys.argv[3])).fit(x, y)
fitting = len(hits)
np.savez(sys.argv[1], *(np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(model.params_)), model.predict_proba(x))
print(json.dumps({"cache_hits": len(hits), "cache_hits_fitting": fitting, "programs": programs}))
"""
SECOND_PROCESS_FITS = [
    pytest.param("SparseGPClassifier", {"num_inducing": 5, "max_iter": 3}, "binary"),  # full batch, L-BFGS
    pytest.param("SparseGPClassifier", {"num_inducing": 5, "max_iter": 3, "tol": 0.0}, "binary",
                 marks=pytest.mark.exhaustive),
    pytest.param("ExactGPClassifier", {"max_iter": 3}, "binary"),  # a loop of its own beside the trainer
    pytest.param("MultiClassEPClassifier", {"num_inducing": 5, "max_iter": 30, "tol": 0.0}, "multiclass",
                 marks=pytest.mark.exhaustive),
]


@pytest.mark.heavy
@pytest.mark.parametrize("estimator, settings, task", SECOND_PROCESS_FITS)
def test_a_fit_in_a_second_process_loads_the_default_cache_with_the_same_bits(estimator, settings, task, tmp_path):
    """With ``$PEP_COMPILATION_CACHE`` unset (the default: the per-user directory, here under a temporary
    ``XDG_CACHE_HOME``), an estimator's fit in a fresh process compiles and writes its programs; the same fit in
    a second fresh process loads them, every one, however quickly it had compiled (none is compiled again,
    :func:`~pep_gp.pipeline.engine.compilation.every_program_cached`), and ends with bit-identical parameters
    and probabilities — the trainer's estimators and those with a loop of their own (the untied EP ones) alike."""
    env = {k: v for k, v in os.environ.items() if k not in (COMPILATION_CACHE_ENV, "JAX_COMPILATION_CACHE_DIR")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    runs = []
    for name in ("cold", "warm"):
        done = subprocess.run([sys.executable, "-c", FIT, str(tmp_path / f"{name}.npz"), estimator,
                               json.dumps(settings), task, COMPILE_EVENT], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert runs[0]["cache_hits"] == 0 and runs[1]["cache_hits_fitting"] >= 1, runs
    assert runs[1]["cache_hits"] == len(runs[1]["programs"]) == len(runs[0]["programs"]), runs
    assert any((tmp_path / "xdg" / "pep" / "jax").iterdir())
    assert _leaves(tmp_path / "warm.npz") == _leaves(tmp_path / "cold.npz")


def test_the_cache_directory_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv(COMPILATION_CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compilation_cache_dir() == tmp_path / "xdg" / "pep" / "jax"  # on by default, per user
    monkeypatch.setenv(COMPILATION_CACHE_ENV, "on")
    assert compilation_cache_dir() == tmp_path / "xdg" / "pep" / "jax"
    monkeypatch.setenv(COMPILATION_CACHE_ENV, "OFF")
    assert compilation_cache_dir() is None
    monkeypatch.setenv(COMPILATION_CACHE_ENV, str(tmp_path / "mine"))
    assert use_compilation_cache() == tmp_path / "mine" and (tmp_path / "mine").is_dir()
    assert jax.config.jax_compilation_cache_dir == str(tmp_path / "mine")
    assert (tmp_path / "mine").stat().st_mode & 0o077 == 0  # the owner's only: JAX trusts what it loads
    (tmp_path / "file").write_text("")
    monkeypatch.setenv(COMPILATION_CACHE_ENV, str(tmp_path / "file"))
    with pytest.raises(InputError, match=r"PEP_COMPILATION_CACHE: expected 'on', 'off' or a directory, found .*file"):
        use_compilation_cache()
    monkeypatch.setenv(COMPILATION_CACHE_ENV, "off")
    assert use_compilation_cache() is None and not jax.config.jax_compilation_cache_dir
    monkeypatch.delenv(COMPILATION_CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))  # the default directory cannot be created
    with pytest.warns(RuntimeWarning, match=r"no persistent compilation cache: cannot create .*file/pep/jax"):
        assert use_compilation_cache() is None and not jax.config.jax_compilation_cache_dir
    monkeypatch.setenv(COMPILATION_CACHE_ENV, "on")  # asked for: an error
    with pytest.raises(InputError, match=r"PEP_COMPILATION_CACHE: cannot create the directory .*file/pep/jax"):
        use_compilation_cache()
    monkeypatch.undo()
    use_compilation_cache()  # the test run's own cache again (tests/conftest.py), for the next tests here


def _eager_names() -> set[str]:
    """The names JAX gives the programs of array operations run eagerly: jax.numpy's and jax.lax's functions, JAX's
    primitives, and the seeding of a random key."""
    import jax.extend.core as extend
    import jax.extend.core.primitives as primitives

    return (set(dir(jnp)) | set(dir(jax.lax)) | {"_threefry_seed", "<unnamed function>"}
            | {value.name for value in vars(primitives).values() if isinstance(value, extend.Primitive)})


EAGER_FREE_FITS = [
    pytest.param("SparseGPRegressor", {"num_inducing": 6}, "regression"),
    pytest.param("MultiClassGPClassifier", {"num_inducing": 6, "max_iter": 25}, "multiclass"),
    pytest.param("CollapsedGPRegressor", {"num_inducing": 6}, "regression", marks=pytest.mark.heavy),
    pytest.param("SparseGPClassifier", {"num_inducing": 6}, "binary", marks=pytest.mark.heavy),
    pytest.param("TiedEPClassifier", {"num_inducing": 6}, "binary", marks=pytest.mark.heavy),
    pytest.param("ExactGPClassifier", {}, "binary", marks=pytest.mark.heavy),
    pytest.param("DirectMultiClassGPClassifier", {"num_inducing": 6, "max_iter": 25}, "multiclass",
                 marks=pytest.mark.heavy),
    pytest.param("MultiClassEPClassifier", {"num_inducing": 6, "max_iter": 25}, "multiclass", marks=pytest.mark.heavy),
    pytest.param("DeepGPRegressor", {"num_inducing": 6, "max_iter": 5}, "regression", marks=pytest.mark.heavy),
    pytest.param("MultiClassDeepGPClassifier", {"num_inducing": 6, "max_iter": 5}, "multiclass",
                 marks=pytest.mark.heavy),
]


@pytest.mark.parametrize("estimator, settings, task", EAGER_FREE_FITS)
def test_a_fit_and_its_prediction_run_no_array_operation_eagerly(estimator, settings, task):
    """Every program a fit and its predictions run is one of pep's own: an array operation run eagerly (a start's
    ``jnp.log``, ``jnp.zeros``, ``jnp.asarray`` of a numpy array) is a program of its own to trace, lower and
    compile (or load) in every new process, 10-30 ms each; 18 of them took 0.3 s of ``SparseGPRegressor()``'s
    1.8 s fit in a second process on boston (issue 63). Programs compiled earlier in this process are forgotten
    first, so that each one the fit runs is seen."""
    import pep_gp

    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 2))
    latent = np.sin(2 * x[:, 0]) + 0.5 * x[:, 1]
    y = {"regression": latent + 0.1 * rng.normal(size=40), "binary": latent > 0,
         "multiclass": np.digitize(latent, [-0.5, 0.5])}[task]
    jax.clear_caches()
    with compiled_programs() as names:
        model = getattr(pep_gp, estimator)(**settings).fit(x, y)
        model.predict_proba(x) if task != "regression" else model.predict(x, return_std=True)
    eager = _eager_names()
    assert names and not {name for name in names if name.removeprefix("jit(").removesuffix(")") in eager}, dict(names)


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_compiled_programs_are_released_before_the_mappings_run_out(monkeypatch):
    """Past a fraction of ``vm.max_map_count`` every compiled program is released (a process that had
    compiled thousands segfaulted in its next compilation); below it nothing is."""
    from pep_gp.pipeline.engine import compilation

    square = jax.jit(lambda x: x * x)
    square(jnp.ones(3))
    assert square._cache_size() == 1
    assert not compilation.release_compiled_programs_if_crowded()  # a test process is far below the limit
    assert square._cache_size() == 1
    monkeypatch.setattr(compilation, "MAPS_FRACTION", 0.0)
    assert compilation.release_compiled_programs_if_crowded()
    assert square._cache_size() == 0
    np.testing.assert_array_equal(square(jnp.ones(3)), np.ones(3))  # compiled again when used
