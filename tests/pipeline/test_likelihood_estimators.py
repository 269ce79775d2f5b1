"""The sparse GP's likelihoods as estimator arguments (issue 39, item 3): a Student-t regressor ignores an
outlier the Gaussian one follows, a Poisson regressor recovers a synthetic rate from counts, a negative-binomial
one the rate of over-dispersed counts (and beats the Poisson one on them in test NLL), a logistic
classifier fits and predicts its own probabilities, and each records its likelihood in the run it saves."""

from __future__ import annotations


import numpy as np
import pytest
from scipy import special, stats

import pep_gp
from pep_gp import MultiClassGPClassifier, SparseGPClassifier, SparseGPRegressor
from pep_gp.pipeline.runs.config import TrainConfig
from pep_gp.pipeline.runs.run import load_run
from pep_gp.pipeline.training.trainer import TrainJob, train
from tests.fits import fit


@pytest.fixture(scope="module")
def curve():
    """sin(x) at 60 sorted inputs with noise 0.1, and one outlier 6 units above the curve near x = 0.5."""
    rng = np.random.default_rng(0)
    x = np.sort(rng.uniform(-3, 3, 60))[:, None]
    f = np.sin(x[:, 0])
    y = f + 0.1 * rng.normal(size=60)
    outlier = int(np.argmin(np.abs(x[:, 0] - 0.5)))
    y[outlier] += 6.0
    return x, f, y, outlier


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_a_student_t_fit_ignores_the_outlier_the_gaussian_follows(curve, tmp_path):
    x, f, y, outlier = curve
    settings = dict(num_inducing=12, max_iter=150, learning_rate=0.05)
    gaussian = fit(SparseGPRegressor(**settings), x, y)
    robust = fit(SparseGPRegressor(likelihood="student-t", **settings), x, y)
    pulled = [abs(model.predict(x[outlier:outlier + 1])[0] - f[outlier]) for model in (gaussian, robust)]
    assert pulled[1] < 0.05 < 0.15 < pulled[0]
    assert np.sqrt(np.mean((robust.predict(x) - f) ** 2)) < np.sqrt(np.mean((gaussian.predict(x) - f) ** 2))
    low, median, high = robust.predict_quantiles(x, (0.05, 0.5, 0.95)).T  # a symmetric, heavy-tailed predictive
    np.testing.assert_allclose(median, robust.predict(x), rtol=0, atol=1e-8)
    np.testing.assert_allclose(high - median, median - low, rtol=1e-8)
    robust.save(tmp_path / "run")
    assert load_run(tmp_path / "run").meta["model_settings"]["likelihood"] == "student-t"
    loaded = pep_gp.load(tmp_path / "run")
    assert loaded.likelihood == "student-t"
    np.testing.assert_allclose(loaded.predict(x), robust.predict(x), rtol=1e-12)


@pytest.mark.heavy
def test_a_student_t_regressor_at_its_defaults_beats_the_gaussian_on_gross_outliers():
    """Issue 63, item 5: sin(2x) at 200 inputs with noise 0.1, 7 % of the targets moved by ±3–6. At the
    defaults the Student-t regressor lands closer to the function and scores the clean test targets
    better than the Gaussian one (it landed 0.69 from the function, the Gaussian 0.21, while its tied
    factor started from init's all-noise one: :meth:`~pep_gp.core.models.power_ep.PowerEPSparseGP.settled`)."""
    rng = np.random.default_rng(0)
    x = np.sort(rng.uniform(-3, 3, 200))[:, None]
    y = np.sin(2.0 * x[:, 0]) + 0.1 * rng.standard_normal(200)
    moved = rng.choice(200, 14, replace=False)
    y[moved] += rng.choice([-1.0, 1.0], 14) * rng.uniform(3.0, 6.0, 14)
    x_test = np.linspace(-3, 3, 300)[:, None]
    f_test = np.sin(2.0 * x_test[:, 0])
    y_test = f_test + 0.1 * rng.standard_normal(300)
    scores = {}
    for likelihood in ("gaussian", "student-t"):
        model = fit(SparseGPRegressor(likelihood=likelihood), x, y)
        scores[likelihood] = (np.sqrt(np.mean((model.predict(x_test) - f_test) ** 2)),
                              model.calibration_report(x_test, y_test)["test_nll"])
    assert scores["student-t"][0] < 0.5 * scores["gaussian"][0]  # 0.031 against 0.197
    assert scores["student-t"][1] < scores["gaussian"][1] - 1.0  # −0.69 against 1.13 nats


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_a_poisson_fit_recovers_the_rate_of_counts(curve):
    """Counts of rate exp(1 + sin x): the fitted log-rate within 0.3 (RMS) of the truth, the counts kept
    as they are (no standardisation), and predict's mean E[e^f] = e^{m + v/2}."""
    x, f, _, _ = curve
    rate = np.exp(1.0 + f)
    counts = np.random.default_rng(1).poisson(rate)
    model = fit(SparseGPRegressor(likelihood="poisson", num_inducing=12, max_iter=200, learning_rate=0.05), x, counts)
    assert (model.targets_.shift, model.targets_.scale) == (0.0, 1.0)
    mean, var = model.predict_f(x)
    assert np.sqrt(np.mean((mean - np.log(rate)) ** 2)) < 0.3
    np.testing.assert_allclose(model.predict(x), np.exp(mean + var / 2), rtol=1e-12)
    quantiles = model.predict_quantiles(x, (0.05, 0.5, 0.95))  # counts: integers, by quadrature over f
    assert np.array_equal(quantiles, np.round(quantiles)) and np.all(np.diff(quantiles, axis=1) >= 0)
    assert 0.8 <= np.mean((counts >= quantiles[:, 0]) & (counts <= quantiles[:, 2])) <= 1.0
    with pytest.raises(ValueError, match="likelihood 'poisson' needs counts"):
        fit(SparseGPRegressor(likelihood="poisson", max_iter=1), x, counts - 0.5)


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_a_negative_binomial_fit_recovers_the_rate_and_beats_poisson_on_over_dispersed_counts():
    """80 counts drawn from NB(rate e^{1.5 + sin x}, dispersion r = 1) (variance μ + μ²): the fitted
    log-rate within 0.4 (RMS) of the truth at the training rows and r within a factor 2 of 1; on 400
    held-out rows its test NLL (its own predictive mass, ``calibration_report``) within 0.06 nats of the
    true model's and at least 0.05 below the Poisson GP's, which has only the latent variance for the
    extra spread (measured: RMS 0.18, r = 1.24, NLL 2.633 against 2.613 true and 2.732 Poisson)."""
    rng = np.random.default_rng(4)
    x = rng.uniform(-3, 3, (480, 1))
    log_rate, dispersion = 1.5 + np.sin(x[:, 0]), 1.0
    counts = rng.negative_binomial(dispersion, dispersion / (dispersion + np.exp(log_rate)))
    settings = dict(num_inducing=8, max_iter=150, learning_rate=0.05)
    nb = fit(SparseGPRegressor(likelihood="negative-binomial", **settings), x[:80], counts[:80])
    poisson = fit(SparseGPRegressor(likelihood="poisson", **settings), x[:80], counts[:80])
    assert np.sqrt(np.mean((nb.predict_f(x[:80])[0] - log_rate[:80]) ** 2)) < 0.4
    assert 0.5 < float(nb.model_.likelihood.dispersion(nb.params_.likelihood)) < 2.0
    true_nll = -np.mean(stats.nbinom.logpmf(counts[80:], dispersion, dispersion / (dispersion + np.exp(log_rate[80:]))))
    nb_nll, poisson_nll = (model.calibration_report(x[80:], counts[80:])["test_nll"] for model in (nb, poisson))
    assert true_nll <= nb_nll + 0.01 and nb_nll < true_nll + 0.06
    assert nb_nll < poisson_nll - 0.05


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_a_logistic_classifier_predicts_its_sigmoid_integral(curve):
    x, _, y, _ = curve
    labels = np.where(y > 0, "up", "down")
    model = fit(SparseGPClassifier(likelihood="logistic", num_inducing=8, max_iter=60), x, labels)
    assert np.mean(model.predict(x) == labels) > 0.9
    mean, var = model.predict_f(x[:5])
    rng = np.random.default_rng(2)
    f = mean + np.sqrt(var) * rng.standard_normal((200_000, 5))
    expected = np.mean(1 / (1 + np.exp(-f)), axis=0)
    proba = model.predict_proba(x[:5])[:, 1]
    np.testing.assert_allclose(proba, expected, atol=5 * 0.5 / np.sqrt(200_000))
    draws = model.sample_y(x[:5], n_samples=4_000, seed=0)  # logistic noise on f: p = σ(f)
    assert np.all(np.abs((draws == "up").mean(axis=0) - proba) < 5 * np.sqrt(proba * (1 - proba) / 4_000) + 1e-9)


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_a_softmax_classifier_predicts_its_expected_softmax_and_draws_its_labels(curve, tmp_path):
    """``MultiClassGPClassifier(likelihood="softmax")`` on three bands of ``sin(x)`` (60 rows; its inducing inputs
    fixed, as the fit's notes say): ``predict_proba`` is the softmax averaged over draws of
    ``predict_f``'s Gaussians (within 5 Monte Carlo standard errors plus the rule's 1e-4), ``sample_y``'s labels
    (the argmax under Gumbel noise) come at those rates, and the saved run loads as the softmax model it is."""
    x, f, _, _ = curve
    labels = np.digitize(f, [-0.5, 0.5])
    model = fit(MultiClassGPClassifier(num_inducing=8, max_iter=60, likelihood="softmax"), x, labels)
    assert model.notes_[:1] == ["train_inducing = none: false (with the softmax likelihood)"]
    assert np.mean(model.predict(x) == labels) > 0.8
    model.save(tmp_path / "run")
    loaded = pep_gp.load(tmp_path / "run")
    assert loaded.get_params() == model.get_params()
    assert {name: loaded.model_settings_[name] for name in ("likelihood", "train_inducing")} == {
        "likelihood": "softmax", "train_inducing": False} and loaded.model_settings_ == model.model_settings_
    np.testing.assert_array_equal(loaded.predict_proba(x), model.predict_proba(x))
    mean, var = model.predict_f(x[:5])
    rng = np.random.default_rng(2)
    draws = mean + np.sqrt(var) * rng.standard_normal((200_000, *mean.shape))
    expected = special.softmax(draws, axis=-1).mean(axis=0)
    proba = model.predict_proba(x[:5])
    np.testing.assert_allclose(proba, expected, atol=5 * 0.5 / np.sqrt(200_000) + 1e-4)
    sampled = model.sample_y(x[:5], n_samples=4_000, seed=0)
    rates = np.stack([(sampled == c).mean(axis=0) for c in model.classes_], axis=1)
    assert np.all(np.abs(rates - proba) < 5 * np.sqrt(proba * (1 - proba) / 4_000) + 1e-9)


def test_an_unknown_likelihood_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match="likelihood: Input should be 'gaussian', 'student-t', 'poisson' or "
                                         "'negative-binomial'"):
        SparseGPRegressor(likelihood="cauchy").fit(np.zeros((4, 1)), np.zeros(4))


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_pep_train_takes_the_likelihood_from_the_model_section_and_records_it(regression_store, tmp_path):
    """``[model] likelihood = "student-t"`` (``--set model.likelihood=student-t``) on a store: the run's
    manifest records it, and the run loads as a Student-t regressor that ``pep predict`` reads."""
    config = TrainConfig(model={"num_inducing": 4, "likelihood": "student-t", "dof": 5.0, "train_dof": False},
                         max_steps=3, batch_size=1000)
    train(TrainJob("sparse-gp-regressor", regression_store, config, tmp_path / "run"))
    settings = load_run(tmp_path / "run").meta["model_settings"]
    assert (settings["likelihood"], settings["dof"], settings["train_dof"]) == ("student-t", 5.0, False)
    loaded = pep_gp.load(tmp_path / "run")
    assert loaded.likelihood == "student-t" and loaded.model_.likelihood.name == "student-t"
    raw_dof = loaded.params_.likelihood["raw_dof"]
    np.testing.assert_allclose(float(loaded.model_.likelihood.scale_and_dof(loaded.params_.likelihood)[1]), 5.0,
                               rtol=1e-12, err_msg=f"dof moved although train_dof is false ({raw_dof})")


@pytest.mark.heavy
@pytest.mark.parametrize("likelihood", ["gaussian", pytest.param("student-t", marks=pytest.mark.heavy)])
def test_a_noise_not_trained_keeps_its_value_to_the_bit_and_a_trained_one_moves(likelihood):
    """``train_noise=False`` holds a known measurement noise: the fitted noise parameter has the bits it
    started from (the Gaussian's variance, the Student-t's scale); trained, the same fit moves it."""
    rng = np.random.default_rng(4)
    x = rng.uniform(-3, 3, (60, 1))
    y = np.sin(x[:, 0]) + 0.3 * rng.normal(size=60)
    name = {"gaussian": "raw_noise_variance", "student-t": "raw_scale"}[likelihood]
    fixed, trained = (fit(SparseGPRegressor(num_inducing=5, likelihood=likelihood, noise_variance=0.05,
                                            train_noise=train, max_iter=30), x, y) for train in (False, True))
    initial = fixed.model_.likelihood.init_params(*((0.05,) if likelihood == "gaussian" else (0.05 ** 0.5, 4.0)))
    assert np.asarray(fixed.params_.likelihood[name]).tobytes() == np.asarray(initial[name]).tobytes()
    assert abs(float(trained.params_.likelihood[name]) - float(initial[name])) > 1e-3
