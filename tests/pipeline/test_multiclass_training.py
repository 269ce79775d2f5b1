"""multiclass-sep / multiclass-direct through the coordinator and the engine (issue 5 item 2): bit-
identical for any number of workers, identical after an interrupted run resumes, SEP learns, and stores
that do not fit are refused."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pep_gp.pipeline.training.trainer import Trainer, TrainJob, train

from pep_gp.pipeline.runs.run import evaluate, load_run
from pep_gp.pipeline.engine import InProcess, connect
from pep_gp.pipeline.errors import InputError
from pep_gp.pipeline.models import MODELS
from tests.pipeline.test_distributed import without_seconds
from tests.trainstores import FAST, config_for, leaves_equal

SEP = "multiclass-sep"


def job(store, run_dir, model=SEP, settings=None, **config):
    return TrainJob(model, store, config_for(model, FAST.model_copy(update={**config, "model": {**FAST.model, **(settings or {})}})),
                    run_dir)


@pytest.mark.exhaustive
@pytest.mark.slow
def test_sep_in_process_one_and_two_workers_are_bit_identical(three_class_store, cluster, tmp_path):
    reference = train(job(three_class_store, tmp_path / "in-process"))
    one = connect("local:1")
    try:
        single = train(job(three_class_store, tmp_path / "one-worker"), one)
    finally:
        one.close()
    double = train(job(three_class_store, tmp_path / "two-workers"), cluster)
    for result in (single, double):
        assert leaves_equal(result.params, reference.params)
        assert without_seconds(result.history) == without_seconds(reference.history)


@pytest.mark.exhaustive
@pytest.mark.slow
@pytest.mark.parametrize("model, store, settings", [(SEP, "three_class_store", None),
                                                    ("multiclass-direct", "three_class_store", None),
                                                    ("tied-ep-classifier", "binary_store", {"projection": "wasserstein"})])
def test_interrupted_run_resumes_to_identical_params(model, store, settings, tmp_path, request):
    store = request.getfixturevalue(store)
    reference = train(job(store, tmp_path / "whole", model, settings))
    first = train(job(store, tmp_path / "cut", model, settings), until_step=7)
    assert first.steps == 7 and not first.finished
    resumed = train(job(store, tmp_path / "cut", model, settings), resume=True)
    assert leaves_equal(resumed.params, reference.params)
    assert without_seconds(resumed.history) == without_seconds(reference.history)
    assert leaves_equal(load_run(tmp_path / "cut").trees["params"], reference.params)
    assert evaluate(tmp_path / "cut")["test_nll"] == reference.history[-1]["test_nll"]


@pytest.mark.exhaustive
@pytest.mark.slow
def test_sep_improves_held_out_nll(three_class_store, tmp_path):
    trainer = Trainer(job(three_class_store, tmp_path, epochs=4), InProcess())
    before = trainer.evaluate(trainer.fresh_state().params)
    result = trainer.run()
    after = result.history[-1]
    counts = np.asarray(three_class_store.attrs["class_counts"]["test"])
    frequencies_nll = -np.sum(counts * np.log(counts / counts.sum())) / counts.sum()
    assert before["test_nll"] == pytest.approx(math.log(3), abs=0.05)  # q = prior: near-uniform
    assert after["test_nll"] < 0.8 * frequencies_nll and after["test_error"] < 0.3
    assert result.rejected_steps == 0 and after["n_test"] == 100


@pytest.mark.exhaustive
@pytest.mark.slow
def test_float32_kernel_products_follow_the_float64_run(three_class_store, tmp_path):
    """``kernel_products = "float32"`` through the trainer: every epoch's held-out NLL and energy within
    1e-6 relative of the float64 run's, the same errors, and the setting recorded with the run."""
    runs = {products: train(job(three_class_store, tmp_path / products, settings={"kernel_products": products}))
            for products in ("float64", "float32")}
    for fast, exact in zip(runs["float32"].history, runs["float64"].history, strict=True):
        assert fast["test_error"] == exact["test_error"]
        assert fast["test_nll"] == pytest.approx(exact["test_nll"], rel=1e-6)
        assert fast["energy_per_row"] == pytest.approx(exact["energy_per_row"], rel=1e-6)
    assert fast["test_nll"] != exact["test_nll"]  # the setting reached the kernel
    assert load_run(tmp_path / "float32").meta["config"]["model"]["kernel_products"] == "float32"


@pytest.mark.exhaustive
@pytest.mark.slow
def test_stores_and_powers_that_do_not_fit_are_refused(binary_store, regression_store, three_class_store, tmp_path):
    with pytest.raises(InputError, match="needs a classification store"):
        Trainer(job(regression_store, tmp_path), InProcess())
    with pytest.raises(InputError, match="is binary and needs 2 classes; this store has 3"):
        Trainer(job(three_class_store, tmp_path, "sparse-gp-classifier"), InProcess())
    with pytest.raises(InputError, match=r"invalid settings of --model multiclass-sep: model.alpha: Input should "
                                         r"be greater than 0"):
        Trainer(job(three_class_store, tmp_path, settings={"alpha": 0.0}), InProcess())
    with pytest.raises(InputError, match=r"model.kernel_products: Input should be 'float64' or 'float32' "
                                         r"\(found 'float16'\)"):
        Trainer(job(three_class_store, tmp_path, settings={"kernel_products": "float16"}), InProcess())
    assert {SEP, "multiclass-direct"} <= set(MODELS)
    binary = train(job(binary_store, tmp_path / "binary", epochs=1))  # two classes are a special case
    assert np.isfinite(binary.history[-1]["test_nll"])


@pytest.mark.exhaustive
@pytest.mark.slow
@pytest.mark.parametrize("model", [SEP, "multiclass-direct"])
def test_coordinator_gradient_through_the_shared_quantities_is_the_plain_gradient(three_class_store, tmp_path,
                                                                                  model):
    """The coordinator computes chol(K_c) and the cavities once per step and back-propagates into them
    once (pep_gp.pipeline.models: step-shared quantities): value and gradient must equal autodiff of the plain
    contract G + (N/|B|) Σ L on the same minibatch."""
    import jax
    import jax.numpy as jnp

    import pep_gp.core
    from pep_gp.pipeline.training.step import DataTerm, minibatch_energy

    trainer = Trainer(job(three_class_store, tmp_path, model), InProcess())
    state = trainer.fresh_state()
    trainer.step(state)  # a refined factor and moved hyper-parameters, away from the initial state
    blocks = trainer.schedule.blocks(1)
    rows = [trainer.train.source.read(b) for b in blocks]
    x, y, mask = (np.concatenate([getattr(r, f) for r in rows]) for f in ("x", "y", "mask"))
    scale, size, model = trainer.n_total / mask.sum(), trainer.data_size, trainer.model
    with pep_gp.core.float64():
        shared, pullback = jax.vjp(lambda p: model.step_shared(p, size), state.params)
        data_value, data_grad = trainer.train.map_sum(DataTerm(model), (state.params, shared), blocks)
        value, grad = minibatch_energy(model, size, state.params, shared, pullback, data_value, data_grad, scale)

        def plain(p):
            again = model.step_shared(p, size)
            return (model.global_energy(p, again, size)
                    + scale * model.data_energy(p, again, jnp.asarray(x), jnp.asarray(y), jnp.asarray(mask)))

        expected_value, expected_grad = jax.jit(jax.value_and_grad(plain))(state.params)
    assert float(value) == pytest.approx(float(expected_value), rel=1e-10)
    for a, b in zip(jax.tree_util.tree_leaves(grad), jax.tree_util.tree_leaves(expected_grad)):
        np.testing.assert_allclose(a, b, rtol=1e-7, atol=1e-9 * np.abs(b).max())


def test_the_damping_schedule_of_host_steps_is_float64_outside_the_float64_scope():
    """``MultiClassEPClassifier`` draws every step's ρ_t on the host before its float64 scope: by jax.numpy there
    the schedule had been float32 (ρ_t off by up to 1e-8, which moved its fits' trajectories)."""
    import jax

    from pep_gp.pipeline.models.multiclass import MultiClassSettings

    rho = MultiClassSettings(damping=0.5, damping_decay=0.9).damping_schedule(7)
    steps = np.arange(60)
    with jax.enable_x64(False):  # as before the float64 scope (the tests run in it)
        schedule = rho(steps)
    assert schedule.dtype == np.float64
    np.testing.assert_array_equal(schedule, np.maximum(0.5 * (0.9 ** (1 / 7)) ** steps, 0.05))


def test_the_untied_loop_runs_with_one_blas_thread_and_gives_the_threads_back(monkeypatch):
    """``MultiClassEPClassifier``'s steps run with one BLAS thread (:func:`pep_gp.pipeline.training.multiclass_ep.fit`:
    OpenBLAS's second thread fought XLA's, 84.5 s against 49.6 s on satellite's first three classes), and the
    process's own count is back after the fit, also after a fit that raised."""
    import pep_gp
    from threadpoolctl import threadpool_info, threadpool_limits

    from pep_gp.pipeline.training import multiclass_ep

    counts = lambda: {lib["filepath"]: lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"}
    seen, steps = [], multiclass_ep._steps

    def watched(*args, **kwargs):
        seen.append(counts())
        if len(seen) > 1:
            raise RuntimeError("stopped in the second fit")
        return steps(*args, **kwargs)

    monkeypatch.setattr(multiclass_ep, "_steps", watched)
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(30, 2)), np.repeat([0, 1, 2], 10)
    with threadpool_limits(limits=2, user_api="blas"):  # the count a 2-core machine starts with, wherever this runs
        before = counts()
        pep_gp.MultiClassEPClassifier(num_inducing=4, max_iter=3, tol=0.0).fit(x, y)
        assert counts() == before
        with pytest.raises(RuntimeError, match="second fit"):
            pep_gp.MultiClassEPClassifier(num_inducing=4, max_iter=3, tol=0.0).fit(x, y)
        assert counts() == before
    assert set(before.values()) == {2} and len(seen) == 2
    assert all(count == {path: 1 for path in before} for count in seen)


def test_the_site_step_decays_per_epoch_and_a_per_step_run_is_not_resumed(three_class_store, tmp_path):
    """Issue 37, item 7: ``damping_decay`` is the decay per pass over the training rows, so a full-batch fit
    (1 step an epoch) and a minibatch fit (300) decay alike per epoch (0.99 per step froze the factor of
    the paper's minibatch Fashion-MNIST run, ρ = 0.05 after 300 steps). A run written when the decay was
    per step loads (``load_run``) but is not resumed into the other schedule."""
    import json

    from pep_gp.pipeline.models.multiclass import MultiClassSettings

    for per_epoch in (1, 300):
        rho = MultiClassSettings().damping_schedule(per_epoch)
        assert [float(rho(k * per_epoch)) for k in (0, 1, 4)] == pytest.approx([1.0, 0.99, 0.99**4], rel=1e-12)
    trainer = Trainer(job(three_class_store, tmp_path / "run"), InProcess())
    assert trainer.schedule.steps_per_epoch > 1
    fresh = trainer.fresh_state()
    newest = trainer.save(fresh) / "manifest.json"
    old = json.loads(newest.read_text())
    assert old.pop("damping_per_epoch") is True
    newest.write_text(json.dumps(old))  # as a pep before the decay per epoch wrote it
    assert leaves_equal(load_run(tmp_path / "run").trees["params"], fresh.params)
    with pytest.raises(InputError, match="decayed by damping_decay = 0.99 per step.*cannot resume"):
        train(job(three_class_store, tmp_path / "run"), resume=True)
