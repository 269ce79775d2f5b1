"""``CollapsedGPRegressor.predict_f`` with a fixed kernel and the inducing inputs at the training inputs
(issue 63): the exact GP's posterior (Rasmussen & Williams 2006, eqs. 2.23–2.24) when ``K_uu`` is factorised
without jitter, and otherwise the posterior of the jittered model, whose only departure from the exact GP
is the jitter's (:mod:`pep_gp.core.linalg`), proportional to it."""

import mpmath
import numpy as np
import pytest
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

from pep_gp import CollapsedGPRegressor
from pep_gp.core.linalg import DEFAULT_JITTER
from pep_gp.core.parameters import constrained
from pep_gp.kernels import SquaredExponential
from tests import tiny

LENGTHSCALE, VARIANCE, NOISE = 0.6, 1.3, 0.02  # the kernel in standardised inputs, the noise in standardised y


def _fit(x, y, alpha, **settings):
    kernel = SquaredExponential(LENGTHSCALE, VARIANCE, fixed=("lengthscales", "variance"))
    return CollapsedGPRegressor(kernel=kernel, inducing_points=x, train_inducing=False, noise_variance=NOISE,
                                alpha=alpha, max_iter=0, **settings).fit(x, y)


def _posterior(model, x, y, x_new, jitter):
    """The latent posterior at ``x_new`` in ``y``'s units, dense, in mpmath at 40 digits (a float64 inverse of
    ``K_uu + jitter·σ_f²I``, cond ≈ 1e8, is itself off by 1e-7): ``Q_*f Σ⁻¹ y`` and ``K_** − Q_*f Σ⁻¹ Q_f*`` with
    ``Q = K_·u (K_uu + jitter·σ_f²I)⁻¹ K_u·`` and ``Σ = Q_ff + diag(αD_ff + σ²)`` (Bui, Yan & Turner 2017, §3.6,
    eq. 128, with u at ``x``); at zero jitter ``Q = K`` and ``D = 0``, the exact GP."""
    xs, xn = (x - model.x_mean_) / model.x_std_, (x_new - model.x_mean_) / model.x_std_
    shift, scale = model.targets_.shift, model.targets_.scale
    noise = float(constrained(model.params_)["noise_variance"])
    with mpmath.workdps(40):
        k = lambda a, b: mpmath.matrix([[VARIANCE * mpmath.exp(-sum((mpmath.mpf(p) - mpmath.mpf(q)) ** 2 for p, q
                                                                      in zip(row, col)) / (2 * LENGTHSCALE**2))
                                         for col in b.tolist()] for row in a.tolist()])
        gram, cross = k(xs, xs), k(xn, xs)
        if jitter:
            inverse_uu = (gram + mpmath.mpf(jitter) * VARIANCE * mpmath.eye(len(xs))) ** -1
            q_ff, q_new = gram * inverse_uu * gram, cross * inverse_uu * gram
        else:  # K K⁻¹ K = K: not through K⁻¹, whose smallest eigenvalues (< 1e-30 here) 40 digits do not resolve
            q_ff, q_new = gram, cross
        covariance = q_ff + mpmath.diag([model.alpha * max(VARIANCE - q_ff[i, i], 0) + noise for i in range(len(xs))])
        weights = q_new * covariance**-1
        mean = weights * mpmath.matrix(((y - shift) / scale).tolist())
        cov = k(xn, xn) - weights * q_new.T
        return (np.array(mean.tolist(), dtype=float)[:, 0] * scale + shift,
                np.array(cov.tolist(), dtype=float) * scale**2)


@pytest.mark.heavy
@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0])
def test_without_jitter_predict_f_at_the_inputs_is_the_exact_gp_posterior(alpha):
    """``K_XX`` positive definite in float64 (cond ≈ 1e6 here), ``jitter=0``: mean and covariance equal the exact
    GP's to 1e-8 in ``y``'s units, for VFE, PEP-α and FITC."""
    rng = np.random.default_rng(3)
    x, x_new = rng.uniform(-3, 3, size=(25, 2)), rng.uniform(-3, 3, size=(7, 2))
    y = 5 * np.sin(x[:, 0]) * np.cos(x[:, 1]) + 3 + rng.normal(size=25)
    model = _fit(x, y, alpha, jitter=0.0)
    exact_mean, exact_cov = _posterior(model, x, y, x_new, jitter=0.0)
    mean, cov = model.predict_f(x_new, full_cov=True)
    np.testing.assert_allclose(mean, exact_mean, rtol=0, atol=1e-8)
    np.testing.assert_allclose(cov, exact_cov, rtol=0, atol=1e-8)


@pytest.mark.exhaustive
@pytest.mark.heavy  # seconds of compiling: the README's tier keeps its time
def test_the_jitter_alone_moves_predict_f_from_the_exact_gp(alpha=0.5):
    """30 inputs on a line: ``K_XX`` is singular in float64 (cond ≈ 1e18), so ``K_uu`` needs its jitter. The
    estimator's predictions are then those of the jittered model to 1e-9 (no precision lost in the O(NM²) form,
    the standardisation or α), and their distance from the exact GP's is the jitter's own: at the default
    relative jitter 1.5e-8 about 1e-6 in the mean (the model's prior covariance of ``f`` differs from ``K_XX`` by
    about ``jitter·σ_f²`` off its diagonal, and the mean by that over the noise variance), a hundred times less
    at a hundred times less jitter."""
    rng = np.random.default_rng(0)
    x, x_new = rng.uniform(-3, 3, size=(30, 1)), rng.uniform(-3, 3, size=(9, 1))
    y = 5 * np.sin(2 * x[:, 0]) + 3 + 0.5 * rng.normal(size=30)
    exact_mean, exact_cov = _posterior(_fit(x, y, alpha), x, y, x_new, jitter=0.0)
    gaps = []
    for jitter in (DEFAULT_JITTER, DEFAULT_JITTER / 100):
        model = _fit(x, y, alpha, jitter=jitter)
        mean, cov = model.predict_f(x_new, full_cov=True)
        jittered_mean, jittered_cov = _posterior(model, x, y, x_new, jitter)
        np.testing.assert_allclose(mean, jittered_mean, rtol=0, atol=1e-12)
        np.testing.assert_allclose(cov, jittered_cov, rtol=0, atol=1e-12)
        gaps.append(np.max(np.abs(mean - exact_mean)))
    assert 1e-8 < gaps[0] < 1e-5 and 30 < gaps[0] / gaps[1] < 300, gaps


@pytest.mark.heavy
@pytest.mark.filterwarnings("ignore:The optimal value found:sklearn.exceptions.ConvergenceWarning")  # a restart at a bound
def test_at_its_defaults_on_fewer_rows_than_its_inducing_points_it_fits_the_exact_gp():
    """Up to ``num_inducing`` (200 by default) training rows the inducing inputs are the rows, so the default
    fit is the exact GP's type-II maximum likelihood with one lengthscale per input: its hyper-parameters score
    within 0.05 nats (the stopping rule's slack; 0.02 measured) of the maximum of the exact GP's log marginal
    likelihood (scikit-learn's, an ARD squared exponential, 3 restarts, on the same standardised rows), and the
    evidence it reports is that likelihood at its hyper-parameters in the targets' own units (Rasmussen &
    Williams 2006, eq. 5.8), to the jitter's 4e-6 nats."""
    x, y = tiny.data()["regression"]
    model = CollapsedGPRegressor().fit(x, y)
    assert model.model_settings_["num_inducing"] == len(y)
    standardised, targets = (x - model.x_mean_) / model.x_std_, model.targets_(y)
    exact = GaussianProcessRegressor(ConstantKernel() * RBF(np.ones(x.shape[1])) + WhiteKernel(),
                                     n_restarts_optimizer=3, random_state=0).fit(standardised, targets)
    kernel = model.kernel_.to_dict()
    fitted = np.log([kernel["variance"][0], *kernel["lengthscales"][0],
                     float(constrained(model.params_)["noise_variance"])])
    at_fitted = exact.log_marginal_likelihood(fitted)
    assert exact.log_marginal_likelihood_value_ - at_fitted < 0.05
    jacobian = len(y) * np.log(model.targets_.scale)
    assert model.log_marginal_likelihood() == pytest.approx(at_fitted - jacobian, abs=1e-4)
