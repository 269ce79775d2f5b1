"""``MultiOutputGPRegressor``: independent outputs against ``P`` separate ``CollapsedGPRegressor`` fits, the
LMC's predictive covariance across outputs, and the shapes of ``y`` it refuses."""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from pep_gp import CollapsedGPRegressor, MultiOutputGPRegressor, load
from pep_gp.core.models.multi_output_regression import MultiOutputParams
from pep_gp.core.parameters import unconstrained
from pep_gp.core.priors import LogNormal
from pep_gp.kernels import SquaredExponential
from pep_gp.means import Constant, Linear


@pytest.fixture
def rows():
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 3, size=(40, 1))
    y = np.column_stack([np.sin(x[:, 0]), np.cos(2 * x[:, 0])]) + 0.1 * rng.normal(size=(40, 2))
    return x, 3.0 * y + np.array([5.0, -1.0]), np.linspace(-3, 3, 7)[:, None]


@pytest.mark.exhaustive
@pytest.mark.heavy  # three fits: ~30 s at a load of 20 on two cores, most of it compiling
@pytest.mark.parametrize("prior_mean", [None, "linear"])
def test_independent_outputs_are_separate_collapsed_fits(rows, prior_mean):
    """With the inducing inputs held, the joint objective is the sum of the outputs' own, so the joint fit is
    the separate fits: evidence and predictions as theirs, each output's mean function as each fit's, to where
    L-BFGS stops two different problems (measured: predictions within 3e-6 relative, a linear mean's weights,
    which the kernel can partly carry, within 1.2e-4)."""
    x, y, x_new = rows
    settings = {"inducing_points": x[:6], "train_inducing": False, "tol": 1e-9, "mean_function": prior_mean}
    joint = MultiOutputGPRegressor(**settings).fit(x, y)
    mean, std = joint.predict(x_new, return_std=True)
    evidence = 0.0
    for p in range(2):
        single = CollapsedGPRegressor(**settings).fit(x, y[:, p])
        evidence += single.log_marginal_likelihood()
        single_mean, single_std = single.predict(x_new, return_std=True)
        np.testing.assert_allclose(mean[:, p], single_mean, rtol=0, atol=1e-5 * np.std(y[:, p]))
        np.testing.assert_allclose(std[:, p], single_std, rtol=1e-5)
        for name in ("constant",) if prior_mean is None else ("weights", "bias"):
            np.testing.assert_allclose(np.asarray(getattr(joint.mean_function_, name))[p],
                                       getattr(single.mean_function_, name), rtol=1e-3)
    assert joint.converged_ and joint.log_marginal_likelihood() == pytest.approx(evidence, rel=1e-9)


@pytest.mark.exhaustive
@pytest.mark.heavy  # one LMC fit: ~30 s at a load of 20 on two cores
def test_lmc_fit_predicts_with_a_covariance_across_outputs(rows):
    """The LMC's covariance across outputs at each row is symmetric, positive definite, its diagonal the
    predictive variance, and its noise the fitted noise; the fit follows both outputs."""
    x, y, x_new = rows
    model = MultiOutputGPRegressor(outputs="lmc", num_inducing=10).fit(x, y)
    mean, cov = model.predict(x_new, return_cov=True)
    _, std = model.predict(x_new, return_std=True)
    f_mean, f_var = model.predict_f(x_new)
    assert cov.shape == (7, 2, 2) and model.mixing_.shape == (2, 2)
    np.testing.assert_allclose(cov, np.swapaxes(cov, 1, 2), rtol=1e-12)
    assert np.all(np.linalg.eigvalsh(cov) > 0)
    np.testing.assert_allclose(np.sqrt(np.diagonal(cov, axis1=1, axis2=2)), std, rtol=1e-10)
    np.testing.assert_allclose(std**2 - f_var, np.broadcast_to(model.noise_variance_, (7, 2)), rtol=1e-8)
    np.testing.assert_allclose(f_mean, mean, rtol=1e-12)
    assert model.score(x, y) > 0.95


@pytest.mark.heavy  # a short LMC fit: ~15 s at a load of 5 on two cores, most of it compiling
def test_the_fitted_mean_is_each_outputs_training_mean_where_the_predictions_revert_to_it(rows):
    """``mean_function_`` (issue 65: it reported zero) is each output's prior mean in the targets' units, the
    training targets' mean per column (numpy's, to rounding), ``[n, P]`` on rows; far from the data (every kernel
    value 0) the predictive means are that prior mean."""
    x, y, _ = rows
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = MultiOutputGPRegressor(outputs="lmc", num_inducing=5, max_iter=3).fit(x, y)
    far = np.array([[1e3], [-1e3]])
    prior = np.asarray(model.mean_function_(far))
    assert isinstance(model.mean_function_, Constant) and prior.shape == (2, 2)
    np.testing.assert_allclose(prior, np.broadcast_to(y.mean(axis=0), (2, 2)), rtol=1e-12)
    np.testing.assert_allclose(model.predict(far), prior, rtol=1e-12)


@pytest.mark.heavy  # four short fits: ~12 s at a load of 2 on two cores, most of it compiling
def test_a_fixed_noise_keeps_every_outputs_bits_and_a_prior_on_it_moves_the_fit(rows):
    """``fixed="noise_variance"`` (issue 65, item 3) keeps each output's noise at its start, to the bit, while the
    kernels move; ``prior={"noise_variance": …}`` is a density of each output's noise (a MAP fit), so a prior
    tight about a large noise leaves the fit's noises larger than the free fit's."""
    x, y, _ = rows
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fixed = MultiOutputGPRegressor(num_inducing=5, noise_variance=0.05, fixed="noise_variance",
                                       max_iter=10).fit(x, y)
        free = MultiOutputGPRegressor(num_inducing=5, noise_variance=0.05, max_iter=10).fit(x, y)
        held = MultiOutputGPRegressor(num_inducing=5, noise_variance=0.05, max_iter=10,
                                      prior={"noise_variance": LogNormal(np.log(0.5), 0.01)}).fit(x, y)
        initial = MultiOutputGPRegressor(num_inducing=5, noise_variance=0.05, fixed="noise_variance",
                                         max_iter=0).fit(x, y)
    start = np.asarray(unconstrained(MultiOutputParams, noise_variance=np.full(2, 0.05))["raw_noise_variance"])
    assert np.asarray(fixed.params_.raw_noise_variance).tobytes() == start.tobytes()
    assert not np.allclose(fixed.params_.kernel.lengthscales.value, initial.params_.kernel.lengthscales.value)
    assert np.all(np.abs(np.asarray(free.params_.noise_variance) - 0.05) > 1e-3)
    np.testing.assert_allclose(held.params_.noise_variance, 0.5, rtol=0.05)
    assert np.all(np.asarray(free.params_.noise_variance) < 0.2)


@pytest.mark.heavy  # one short fit: ~8 s at a load of 2 on two cores, most of it compiling
def test_each_outputs_linear_mean_recovers_its_trend_and_is_reported_in_the_targets_units(rows):
    """``mean_function="linear"`` (issue 65, item 2) gives each output its own ``w_pᵀx + b_p``: on two linear trends
    with noise, and kernels held at a variance of 10⁻⁶ (so the covariance is the noise's: the mean's maximum
    likelihood is least squares), the fitted ``mean_function_`` (data units, ``Linear`` of ``[P, D]`` weights) has
    numpy's least-squares slopes and intercepts, and far from the data the predictions follow it."""
    x = rows[0]
    noise = 0.05 * np.random.default_rng(1).normal(size=(x.shape[0], 2))
    y = np.column_stack([2.0 * x[:, 0] + 1.0, -0.5 * x[:, 0] + 3.0]) + noise
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = MultiOutputGPRegressor(num_inducing=5, mean_function="linear", max_iter=50,
                                       kernel=SquaredExponential(variance=1e-6, fixed="variance")).fit(x, y)
    (slopes, intercepts), *_ = np.linalg.lstsq(np.column_stack([x[:, 0], np.ones(len(x))]), y, rcond=None)
    fitted = model.mean_function_
    assert isinstance(fitted, Linear) and np.shape(fitted.weights) == (2, 1)
    np.testing.assert_allclose(np.ravel(fitted.weights), slopes, rtol=1e-4)
    np.testing.assert_allclose(fitted.bias, intercepts, rtol=1e-4)
    far = np.array([[30.0]])
    np.testing.assert_allclose(model.predict(far), fitted(far), rtol=1e-6)


@pytest.mark.heavy  # four short L-BFGS fits: ~10 s at a load of 2 on two cores
def test_a_warm_start_continues_from_the_last_fit_on_more_rows_and_its_saved_run_predicts_the_same(rows, tmp_path):
    """``warm_start=True``: a fit on 40 rows starts from the fit on 30 of them (fewer iterations than a cold fit's,
    to an optimum of its bound within ``tol`` nats per row of the cold fit's) and conditions on the 40; a fit
    again on the same rows starts at that optimum (two or three quiet iterations); the saved run predicts its
    bits."""
    x, y, x_new = rows
    model = MultiOutputGPRegressor(num_inducing=5, warm_start=True).fit(x[:30], y[:30])
    model.fit(x, y)
    cold = MultiOutputGPRegressor(num_inducing=5).fit(x, y)
    assert model.converged_ and cold.converged_ and model.n_iter_ < cold.n_iter_ and model.x_train_.shape == (40, 1)
    assert abs(model.log_marginal_likelihood_value_ - cold.log_marginal_likelihood_value_) < 3 * model.tol * 40
    optimum = model.log_marginal_likelihood_value_
    model.fit(x, y)
    assert model.converged_ and model.n_iter_ <= 3
    assert 0 <= model.log_marginal_likelihood_value_ - optimum < 3 * model.tol * 40
    model.save(tmp_path / "warm")
    assert load(tmp_path / "warm").predict(x_new).tobytes() == model.predict(x_new).tobytes()


@pytest.mark.heavy  # one short Adam fit: ~5 s at a load of 2 on two cores
def test_early_stopping_scores_each_outputs_validation_nll_and_keeps_the_best(rows):
    """``early_stopping`` (Adam) holds out a tenth of the rows as scikit-learn's ``train_test_split`` does; its
    validation score is the NLL of each output's marginal predictive averaged over rows and outputs, so the best
    score is numpy's NLL of the fitted model's predictions on those rows (the fit ends at its best parameters)."""
    from scipy import stats
    from sklearn.model_selection import train_test_split

    x, y, _ = rows
    model = MultiOutputGPRegressor(num_inducing=5, solver="adam", early_stopping=True, n_iter_no_change=3,
                                   max_iter=300).fit(x, y)
    assert model.n_iter_ < 300 and model.best_validation_score_ == min(model.validation_scores_)
    _, x_validation, _, y_validation = train_test_split(x, y, test_size=0.1, random_state=0)
    mean, std = model.predict(x_validation, return_std=True)
    nll = -np.mean(stats.norm(mean, std).logpdf(y_validation))
    assert model.best_validation_score_ == pytest.approx(nll, rel=1e-9)


@pytest.mark.parametrize("y, message", [
    (np.zeros((40, 2, 1)), r"y must hold one row of targets per row of X, \[N\] or \[N, P\]"),
    (np.zeros((40, 0)), r"with P ≥ 1; got shape \(40, 0\)"),
    (np.zeros((39, 2)), "inconsistent numbers of samples"),
])
def test_bad_y_shapes_are_refused(rows, y, message):
    with pytest.raises(ValueError, match=message):
        MultiOutputGPRegressor().fit(rows[0], y)


@pytest.mark.parametrize("settings, message", [
    ({"latents": 2}, "latents is the LMC's number of latent GPs"),
    ({"outputs": "lmc", "latents": 0}, "latents: Input should be greater than or equal to 1"),
    ({"outputs": "lmc", "shared_kernel": True}, "shared_kernel applies to outputs='independent'"),
    ({"outputs": "coregional"}, "outputs: Input should be 'independent' or 'lmc'"),
    ({"alpha": 1.5}, "alpha: Input should be less than or equal to 1"),
    ({"inducing_points": np.zeros((3, 2))}, "inducing_points has 2 columns"),
    ({"fixed": "dof"}, r"fixed names \['dof'\], which likelihood 'gaussian' does not have; its parameters are "
                       r"\['noise_variance'\]"),
])
def test_bad_settings_are_refused(rows, settings, message):
    with pytest.raises(ValueError, match=message):
        MultiOutputGPRegressor(**settings).fit(rows[0], rows[1])


@pytest.mark.heavy  # a short fit: 7–14 s at a load of 20 on two cores (tests/pipeline/test_tiny_estimators.py fits one too)
def test_one_dimensional_targets_are_one_output(rows, tmp_path):
    x, y, x_new = rows
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = MultiOutputGPRegressor(num_inducing=5, max_iter=3).fit(x, y[:, 0])
    mean, std = model.predict(x_new, return_std=True)
    assert model.n_outputs_ == 1 and mean.shape == std.shape == (7,) and np.all(std > 0)
    assert model.mean_function_ == Constant(float(np.mean(y[:, 0])))
    model.save(tmp_path / "one")
    assert load(tmp_path / "one").predict(x_new).tobytes() == mean.tobytes()


@pytest.mark.heavy  # a short fit: ~5 s at a load of 2 on two cores
def test_targets_of_one_column_are_one_output_through_save_and_load(rows, tmp_path):
    """``y`` ``[N, 1]`` is one output, its predictions ``[n]`` as scikit-learn's ``GaussianProcessRegressor``'s, and
    so are those of the saved run loaded back (issue 65: ``[n, 1]`` when fitted, ``[n]`` when loaded)."""
    x, y, x_new = rows
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = MultiOutputGPRegressor(num_inducing=5, max_iter=3).fit(x, y[:, :1])
    mean = model.predict(x_new)
    model.save(tmp_path / "column")
    loaded = load(tmp_path / "column")
    assert mean.shape == (7,) and loaded.predict(x_new).tobytes() == mean.tobytes()
    assert np.shape(loaded.mean_function_(x_new)) == (7,) and model.n_outputs_ == loaded.n_outputs_ == 1


@pytest.mark.heavy
@pytest.mark.exhaustive  # three fits and a scipy L-BFGS: ~40 s at a load of 20 on two cores
@pytest.mark.parametrize("outputs", ["independent", "lmc"])
def test_the_trainers_fit_is_scipys_lbfgs_on_the_core_bound(rows, outputs):
    """The estimator trains as ``pep train`` does (the trainer's energy of one block, full batch); its fit
    before that was scipy's L-BFGS-B on the core model's bound of the rows as arrays, which is the oracle here:
    from the same start (the estimator at ``max_iter=0``) to the same optimum, predictions to the optimiser's
    tolerance (measured 4e-8 of the targets' units; on linnerud's 20 rows and the LMC, 2e-2 of targets whose
    deviation is 10–25, the evidence 0.0016 nats apart)."""
    import jax
    import jax.numpy as jnp
    import scipy.optimize

    from pep_gp.pipeline.models.protocol import leaves_named
    from pep_gp.pipeline.training.full_batch import FlatParams

    x, y, x_new = rows
    settings = {"outputs": outputs, "num_inducing": 10, "tol": 1e-9, "max_iter": 1000}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        start = MultiOutputGPRegressor(**{**settings, "max_iter": 0}).fit(x, y)
    fitted = MultiOutputGPRegressor(**settings).fit(x, y)
    model, params = start.model_, jax.tree_util.tree_map(jnp.asarray, start.params_)
    flat = FlatParams(params, leaves_named(params, set()))
    value_and_grad = jax.jit(jax.value_and_grad(lambda p: model.log_marginal_likelihood(p, start.x_train_,
                                                                                         start.y_train_)))

    def objective(vector):
        value, grad = value_and_grad(flat.params(vector, params))
        return -float(value), -flat.vector(grad)

    result = scipy.optimize.minimize(objective, flat.vector(params), jac=True, method="L-BFGS-B",
                                     options={"maxiter": 1000, "gtol": 1e-9, "ftol": 0.0})
    start.params_ = jax.tree_util.tree_map(np.asarray, flat.params(result.x, params))
    np.testing.assert_allclose(fitted.predict(x_new), start.predict(x_new), rtol=0, atol=1e-5 * np.std(y))
    assert fitted.log_marginal_likelihood() == pytest.approx(-result.fun - len(x) * np.sum(np.log(start.y_std_)),
                                                             abs=1e-5)


@pytest.mark.heavy
@pytest.mark.exhaustive  # a two-worker LocalCluster and two short LMC fits: ~40 s at a load of 20 on two cores
def test_an_lmc_map_fit_is_bit_identical_on_two_workers(rows, cluster):
    """The trainer's one block is summed by the engine wherever it runs: on ``local:2`` the LMC's fit with a
    kernel prior takes the same L-BFGS iterates, to the bit, as in this process."""
    from pep_gp.kernels import SquaredExponential
    from pep_gp.priors import Gamma
    from tests.trainstores import leaves_equal

    x, y, x_new = rows
    kernel = SquaredExponential(variance=1.0, fixed=("variance",), prior={"lengthscales": Gamma(4.0, 4.0)})
    settings = {"outputs": "lmc", "num_inducing": 5, "max_iter": 4, "kernel": kernel}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # four iterations, on purpose
        here = MultiOutputGPRegressor(**settings).fit(x, y)
        there = MultiOutputGPRegressor(**settings, cluster=cluster.client).fit(x, y)
    assert here.solver_ == there.solver_ == "lbfgs" and here.n_iter_ == there.n_iter_ == 4
    assert leaves_equal(here.params_, there.params_)
    assert here.predict(x_new).tobytes() == there.predict(x_new).tobytes()
