"""The full-batch L-BFGS fit (:mod:`pep_gp.pipeline.training.full_batch`): the trainer's objective, its optimum
(the exact GP evidence where the collapsed bound is exact; the minibatch Adam path's elsewhere) in tens of
iterations where Adam takes hundreds, the estimators' choice of solver, and a fitted model that saves,
loads, warm-starts and streams as an Adam one."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

import pep_gp
from pep_gp import CollapsedGPRegressor, SparseGPClassifier, SparseGPRegressor
from pep_gp.pipeline.data.datasets import ArrayData
from pep_gp.pipeline.engine import InProcess
from pep_gp.pipeline.estimators import base
from pep_gp.pipeline.runs.config import TrainConfig
from pep_gp.core import float64
from pep_gp.pipeline.training import evidence
from pep_gp.pipeline.training.full_batch import FlatParams, FullBatchFit
from pep_gp.pipeline.training.trainer import Trainer, TrainJob
from pep_gp.pipeline.errors import TrainingFailed
from pep_gp.pipeline.models import MODELS
from tests.pipeline.toy_model import ToySpec
from tests.trainstores import leaves_equal


def sine(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.uniform(-3, 3, (n, 2))
    return x, np.sin(x[:, 0]) + 0.5 * x[:, 1] + 0.1 * rng.standard_normal(n)


def energy_of(model) -> float:
    """The fitted energy in the model's (standardised) target units: the evidence plus ``n log scale``."""
    return model.log_marginal_likelihood_value_ + model.n_rows_seen_ * np.log(model.targets_.scale)


def collapsed_bound(model, x, y) -> float:
    """The collapsed PEP-α bound of a fitted Gaussian ``SparseGPRegressor``'s hyper-parameters on its
    standardised rows (:func:`pep_gp.core.models.collapsed_regression.log_marginal_likelihood`)."""
    from pep_gp.core.likelihoods import Gaussian
    from pep_gp.core.models.collapsed_regression import log_marginal_likelihood

    params = model.params_
    with float64():
        return float(log_marginal_likelihood(params.kernel, params.inducing, Gaussian().noise_variance(params.likelihood),
                                             (x - model.x_mean_) / model.x_std_, (y - model.targets_.shift) / model.targets_.scale,
                                             model.alpha, model.jitter))


def trainer_energy(trainer, params) -> float:
    """The trainer's energy of every training row (what its evidence reports, before the targets' scale)."""
    return evidence.energy(trainer.model, trainer.step_fn.parts, trainer.train, params, trainer.data_size,
                           trainer.n_total / trainer.n_rows)


@pytest.mark.heavy
def test_one_evaluation_is_the_trainers_energy_and_its_gradient():
    """The full-batch objective is the trainer's (:func:`~pep_gp.pipeline.training.evidence.energy`), with
    the gradient of its value."""
    x, y = sine(30)
    data = ArrayData(x, (y > 0).astype(np.int64), "classification", 2)
    trainer = Trainer(TrainJob("sparse-gp-classifier", data, TrainConfig(model={"num_inducing": 6}), None),
                      InProcess())
    fit = FullBatchFit(trainer, 10, 1e-4)
    params = trainer.fresh_state().params
    energy, grad = fit.energy_and_grad(params)
    np.testing.assert_allclose(energy, trainer_energy(trainer, params), rtol=1e-12)
    flat = FlatParams(params, trainer.spec.frozen(trainer.settings, params))
    vector, gradient = flat.vector(params), flat.vector(grad)
    with float64():
        for i in (0, vector.size // 2, vector.size - 1):  # central differences of the energy along three entries
            step = 1e-5 * np.eye(vector.size)[i]
            slope = (trainer_energy(trainer, flat.params(vector + step, params))
                     - trainer_energy(trainer, flat.params(vector - step, params))) / 2e-5
            np.testing.assert_allclose(gradient[i], slope, rtol=1e-4, atol=1e-6)


def test_a_start_whose_energy_is_not_finite_fails_the_fit_rather_than_converging(regression_store, monkeypatch):
    """scipy's L-BFGS-B calls the zero gradient the objective gives at a non-finite point converged: at the start
    that ended a fit untrained, with ``converged_`` True and no warning. It fails instead, naming where."""
    monkeypatch.setitem(MODELS, "toy", ToySpec(nan_above=-1.0))
    trainer = Trainer(TrainJob("toy", regression_store, TrainConfig(model={}), None), InProcess())
    with pytest.raises(TrainingFailed, match=r"the full-batch fit cannot start: at the parameters after \d+ site "
                                             r"sweeps the energy is nan and \d+ of 1 gradient entries are not finite"):
        FullBatchFit(trainer, 20, 1e-4).fit()


def test_an_energy_above_the_models_evidence_ceiling_fails_the_full_batch_fit(regression_store, monkeypatch):
    """An energy above what any log marginal likelihood of the rows can be is a diverged approximation, not a
    fit: the full-batch fit fails, naming the ceiling. A minibatch run's energy (an epoch's mean of estimates at
    the parameters of its steps) is not checked, so the same toy trains there."""
    monkeypatch.setitem(MODELS, "toy", ToySpec(ceiling=-1e6))
    message = r"the fit's energy .* exceeds -1e\+06, the most any log marginal likelihood of its \d+ rows can be"
    trainer = Trainer(TrainJob("toy", regression_store, TrainConfig(model={}), None), InProcess())
    with pytest.raises(TrainingFailed, match=message):
        FullBatchFit(trainer, 20, 1e-4).fit()
    result = Trainer(TrainJob("toy", regression_store, TrainConfig(model={}, epochs=1), None), InProcess()).run()
    assert result.history[-1]["energy"] > -1e6 + len(regression_store.arrays("train")[1][:])


def test_a_student_t_fit_never_returns_an_energy_above_its_ceiling():
    """Witness: ``SparseGPRegressor(likelihood="student-t", alpha=0.05)`` on 120 rows with outliers ran to a
    kernel variance of 1.8e11 and an 'evidence' of +7.2e12 after 18 L-BFGS iterations, 'converged' (the term
    ``(N/α)(φ(cav) − φ(q))`` of Power EP's energy is unbounded when ``log t`` varies widely under ``q``, and the
    Student-t's tilted terms fall only logarithmically with the cavity's variance). Either the fit fails, as it
    does on the machine this was written on, or what it returns lies below the ceiling."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 3, (120, 2))
    f = np.sin(x[:, 0]) + 0.5 * x[:, 1]
    rng.standard_normal(120), rng.poisson(np.exp(0.5 + 0.5 * f))  # the draws of the witness's script, kept
    y = f + 0.2 * rng.standard_normal(120)
    y[::15] += 5
    model = SparseGPRegressor(likelihood="student-t", alpha=0.05, num_inducing=10)
    try:
        model.fit(x, y)
    except TrainingFailed as failed:
        assert "the approximation diverged" in str(failed)
        return
    with float64():
        ceiling = model.model_.evidence_ceiling(model.params_, len(y))
    assert energy_of(model) <= ceiling + len(y)


def test_a_count_regressor_at_small_alpha_fits_near_the_variational_limit():
    """Witness of the fault above: at α ≤ 0.05 the Poisson's quadrature gave NaN gradients from its far nodes
    (:func:`~pep_gp.core.quadrature.tilted_moments_by_quadrature`), and ``SparseGPRegressor(likelihood="poisson",
    alpha=0.01)`` ended after 0 iterations at its starting energy, 'converged'. Power EP is continuous in α
    (Bui, Yan & Turner 2017, §3.4): the fit at α = 0.01 rises far above its start, to no less than the α = 0
    (VFE) fit's energy less a nat (measured: 4.6 nats above it, whose L-BFGS stops on a slow ridge)."""
    rng = np.random.default_rng(3)
    x = rng.uniform(-3, 3, (80, 1))
    y = rng.poisson(np.exp(1.0 + np.sin(x[:, 0]))).astype(float)
    fits = {alpha: SparseGPRegressor(likelihood="poisson", alpha=alpha, num_inducing=10, max_iter=300).fit(x, y)
            for alpha in (0.0, 0.01)}
    small = fits[0.01]
    assert small.solver_ == "lbfgs" and small.converged_ and small.n_iter_ >= 10
    assert small.energy_trace_[-1] > small.energy_trace_[0] + 10.0
    assert small.log_marginal_likelihood_value_ > fits[0.0].log_marginal_likelihood_value_ - 1.0


@pytest.mark.heavy
def test_the_collapsed_regressor_at_the_rows_reaches_the_exact_gp_evidence_in_tens_of_iterations():
    """At Z = X (M capped by the rows) the collapsed bound is the exact GP evidence (Bui, Yan & Turner 2017,
    §3): L-BFGS reaches the maximum scikit-learn's exact GP finds on the same standardised rows, in tens of
    iterations, and the minibatch Adam path the same optimum in hundreds of steps."""
    x, y = sine(40)
    fast = CollapsedGPRegressor(num_inducing=50).fit(x, y)
    assert fast.solver_ == "lbfgs" and fast.converged_ and fast.n_iter_ <= 30 and "capped" in fast.notes_[0]
    xs, ys = (x - fast.x_mean_) / fast.x_std_, (y - fast.targets_.shift) / fast.targets_.scale
    kernel = ConstantKernel(1.0, (1e-3, 1e3)) * RBF(np.ones(2), (1e-3, 1e3)) + WhiteKernel(0.1, (1e-6, 10.0))
    exact = GaussianProcessRegressor(kernel, n_restarts_optimizer=3, random_state=0).fit(xs, ys)
    assert abs(energy_of(fast) - exact.log_marginal_likelihood_value_) < 1e-3

    slow = CollapsedGPRegressor(num_inducing=50, solver="adam", tol=1e-6, max_iter=5_000).fit(x, y)
    assert slow.converged_ and slow.n_iter_ > 10 * fast.n_iter_
    assert abs(energy_of(slow) - energy_of(fast)) < 1e-3
    np.testing.assert_allclose(fast.predict(x), slow.predict(x), atol=1e-3 * np.std(y))


@pytest.mark.heavy  # seconds of compiling: the README's tier keeps its time
def test_site_sweeps_and_lbfgs_reach_the_minibatch_paths_optimum():
    """The sparse GP regressor's tied factor moves by site updates: the full-batch fit (L-BFGS on the collapsed
    bound, then a sweep) reaches the optimum and predictive of Adam's steps (full batch, sweeps between them),
    both run to a tight tolerance, in tens of iterations where Adam takes hundreds. The optimum is the collapsed
    PEP-α bound's (Bui, Yan & Turner 2017, §3.6), the energy at the sites' fixed point: the L-BFGS fit reports
    it, and Adam's hyper-parameters score the same under it. (Adam's own reported energy is at the factor of
    its last step, one step behind its hyper-parameters: 0.02 nats above the bound here.)"""
    x, y = sine(60, seed=1)
    tight = {"num_inducing": 8, "train_inducing": False, "tol": 1e-6, "max_iter": 5_000, "jitter": 0.0}
    fast = SparseGPRegressor(**tight).fit(x, y)
    slow = SparseGPRegressor(**tight, solver="adam").fit(x, y)
    assert fast.solver_ == "lbfgs" and fast.converged_ and fast.n_iter_ <= 30
    assert slow.converged_ and slow.n_iter_ > 5 * fast.n_iter_
    assert abs(energy_of(fast) - collapsed_bound(fast, x, y)) < 1e-6
    assert abs(collapsed_bound(slow, x, y) - collapsed_bound(fast, x, y)) < 1e-4
    for a, b in zip(fast.predict(x, return_std=True), slow.predict(x, return_std=True)):
        np.testing.assert_allclose(a, b, atol=1e-2 * np.std(y))


@pytest.mark.heavy  # seconds of compiling: the README's tier keeps its time
def test_exact_sites_fit_the_collapsed_bound_and_one_sweep_settles_them():
    """Where every row is in one block the Gaussian regressor's L-BFGS maximises the collapsed bound itself: its
    hyper-parameters are the collapsed regressor's at the same settings, bit for bit, with one iteration more (the
    sweep), and so are its predictions to rounding. That one sweep puts the factor at the sites' fixed point
    (twenty more leave it there), where the model's own energy is the bound the fit reports: to rounding without
    jitter, to the jitter's effect with it (module docstring of ``full_batch``). A damped factor ends the same:
    in the rounds of sweeps and L-BFGS it lagged the hyper-parameters and ended 6 nats below this optimum. Rows
    beyond a default block are fitted as one block, so the same holds there."""
    x, y = sine(60, seed=3)
    same = {"num_inducing": 8, "noise_variance": 0.01}  # the collapsed regressor's noise starts at 0.1 by default
    for settings, rtol in (({**same, "jitter": 0.0}, 1e-9), (same, 1e-4)):
        sparse = SparseGPRegressor(**settings).fit(x, y)
        collapsed = CollapsedGPRegressor(**settings).fit(x, y)
        assert sparse.solver_ == "lbfgs" and sparse.converged_ and sparse.n_iter_ == collapsed.n_iter_ + 1
        assert leaves_equal(sparse.model_.collapsed_params(sparse.params_), collapsed.params_)
        np.testing.assert_allclose(sparse.predict(x), collapsed.predict(x), atol=1e-6 * np.std(y))
        with float64():
            xs = jnp.asarray((x - sparse.x_mean_) / sparse.x_std_)
            ys = jnp.asarray((y - sparse.targets_.shift) / sparse.targets_.scale)
            own = float(sparse.model_.energy(sparse.params_, xs, ys))
            settled = sparse.model_.settled(sparse.params_, xs, ys, len(x))
        for leaf in ("factor_shift", "factor_chol"):
            np.testing.assert_allclose(getattr(settled, leaf), getattr(sparse.params_, leaf), rtol=1e-8, atol=1e-10)
        assert own == pytest.approx(energy_of(sparse), rel=rtol)
    damped = SparseGPRegressor(**same, damping=0.5).fit(x, y)  # damping paces minibatch steps, not this fit
    assert leaves_equal(damped.params_, sparse.params_)
    x, y = sine(1_100, seed=4)  # more rows than a default block: the regressor's full-batch fit takes them as one
    sparse = SparseGPRegressor(**same).fit(x, y)
    assert leaves_equal(sparse.model_.collapsed_params(sparse.params_), CollapsedGPRegressor(**same).fit(x, y).params_)


@pytest.mark.heavy  # seconds of compiling: the README's tier keeps its time
def test_the_tied_ep_classifiers_sweeps_and_lbfgs_reach_the_minibatch_paths_optimum():
    """The tied-EP classifier's probit sites settle under damped full-batch sweeps, so ``"auto"`` fits it by
    rounds of sweeps and L-BFGS; run to a tight tolerance they reach at least the energy of Adam's steps (full
    batch; on these rows 0.02 nats above where Adam's stopping rule ends) and its probabilities, in a fraction
    of the iterations."""
    x, y = sine(60, seed=2)
    labels = (y > 0).astype(int)
    tight = {"num_inducing": 8, "train_inducing": False, "tol": 1e-6, "max_iter": 5_000}
    fast = pep_gp.TiedEPClassifier(**tight).fit(x, labels)
    slow = pep_gp.TiedEPClassifier(**tight, solver="adam").fit(x, labels)
    assert fast.solver_ == "lbfgs" and fast.converged_ and slow.converged_ and slow.n_iter_ > 3 * fast.n_iter_
    assert 0 <= fast.log_marginal_likelihood_value_ - slow.log_marginal_likelihood_value_ < 0.05
    np.testing.assert_allclose(fast.predict_proba(x), slow.predict_proba(x), atol=1e-2)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")  # one iteration or step each
@pytest.mark.heavy  # seconds of compiling: the README's tier keeps its time
def test_auto_fits_every_row_of_one_default_batch_by_lbfgs_and_more_by_minibatches():
    """Up to the 10,000 rows of one default batch a fit is full batch by L-BFGS: on a table just past the former
    limit of 5,000 rows Adam's full-batch steps took twice the seconds or stopped behind logistic regression
    (docs/results/everyday.md)."""
    x, y = sine(10_001, seed=3)
    labels = (y > 0).astype(int)
    quick = {"num_inducing": 4, "max_iter": 1}
    assert SparseGPClassifier(**quick).fit(x[:7_000], labels[:7_000]).solver_ == "lbfgs"
    assert SparseGPClassifier(**quick).fit(x, labels).solver_ == "adam"


@pytest.mark.exhaustive
@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")  # two iterations or steps each
@pytest.mark.heavy  # seconds of compiling: the README's tier keeps its time
def test_auto_fits_full_batch_where_the_rows_fit_one_batch_and_tol_stops_it(monkeypatch):
    x, y = sine(30)
    labels = (y > 0).astype(int)
    quick = {"num_inducing": 4, "max_iter": 2}
    with pytest.warns(ConvergenceWarning, match="L-BFGS had not converged when max_iter=2"):
        assert SparseGPClassifier(**quick).fit(x, labels).solver_ == "lbfgs"
    assert SparseGPClassifier(**quick, tol=0).fit(x, labels).solver_ == "adam"  # tol=0: every max_iter Adam step
    assert SparseGPClassifier(**quick, batch_size=10).fit(x, labels).solver_ == "adam"  # minibatches asked for
    assert SparseGPClassifier(**quick, early_stopping=True).fit(x, labels).solver_ == "adam"
    auto = SparseGPClassifier(**quick, early_stopping="auto").fit(x, labels)  # only the deep GP regressor's stops
    assert auto.solver_ == "lbfgs" and auto.validation_scores_ is None
    monkeypatch.setattr(base, "FULL_BATCH_ROWS", 20)
    assert SparseGPClassifier(**quick).fit(x, labels).solver_ == "adam"
    with pytest.raises(ValueError, match="solver must be 'auto', 'lbfgs' or 'adam'; got 'newton'"):
        SparseGPClassifier(**quick, solver="newton").fit(x, labels)
    with pytest.raises(ValueError, match="early_stopping evaluates the epochs"):
        SparseGPClassifier(**quick, solver="lbfgs", early_stopping=True).fit(x, labels)


@pytest.mark.exhaustive
@pytest.mark.heavy  # a default-tier test of several seconds (the README's tests stay within 5 minutes)
def test_a_full_batch_fit_saves_loads_warm_starts_and_streams(tmp_path):
    x, y = sine(40)
    labels = (y > 0).astype(int)
    model = SparseGPClassifier(num_inducing=6).fit(x, labels)
    assert model.solver_ == "lbfgs" and model.converged_
    model.save(tmp_path / "run")
    loaded = pep_gp.load(tmp_path / "run")
    np.testing.assert_array_equal(loaded.predict_proba(x), model.predict_proba(x))
    assert loaded.n_iter_ == model.n_iter_

    warm = SparseGPClassifier(num_inducing=6, warm_start=True).fit(x, labels)
    warm.fit(x, labels)  # from where the first fit stopped: two quiet iterations or fewer are left
    assert warm.converged_ and warm.n_iter_ <= 3
    rise = warm.log_marginal_likelihood_value_ - model.log_marginal_likelihood_value_
    assert 0 <= rise < 3 * warm.tol * len(x)  # each iteration rises by less than tol nats per row

    streamed = SparseGPClassifier(num_inducing=6).fit(x, labels)
    steps = streamed.n_iter_
    streamed.partial_fit(x, labels)  # one Adam epoch from the L-BFGS optimum, its fresh Adam state
    assert streamed.solver_ == "adam" and streamed.n_iter_ == steps + 1
    assert np.all(np.isfinite(streamed.predict_proba(x)))


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_a_full_batch_fit_in_process_and_on_two_workers_is_bit_identical(cluster):
    """Its value and gradient are the engine's block sums in the blocks' order, so the iterates are too."""
    x, y = sine(50)
    settings = {"num_inducing": 6, "batch_size": None}
    here = SparseGPRegressor(**settings).fit(x, y)
    there = SparseGPRegressor(**settings, cluster=cluster.client).fit(x, y)
    assert here.solver_ == there.solver_ == "lbfgs"
    assert leaves_equal(here.params_, there.params_)
    np.testing.assert_array_equal(here.energy_trace_, there.energy_trace_)
