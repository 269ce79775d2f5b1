"""ExactGPClassifier(projection=...): exact-GP EP / QP with the EP evidence maximised."""

import warnings

import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from tests import oracles
from pep_gp.core.likelihoods import Probit
from pep_gp.core.models.ep import EP, predict_latent, site_data
from pep_gp import ExactGPClassifier
from pep_gp.core import float64
from pep_gp.pipeline.training.exact_ep import _prior_cov


def _data(n=40, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2))
    return x, (x[:, 0] - 0.5 * x[:, 1] + 0.4 * rng.normal(size=n) > 0).astype(int)


@pytest.mark.exhaustive
@pytest.mark.slow
def test_predictions_match_the_dense_formulas():
    """``predict_latent`` against ``k*ᵀK⁻¹μ`` and ``k** − k*ᵀK⁻¹k* + k*ᵀK⁻¹ΣK⁻¹k*`` in numpy."""
    x, y = _data()
    kernel = oracles.se_bank(jnp.ones(2), 2.0)
    cov = kernel.gram(jnp.asarray(x)[None])[0] + 1e-6 * jnp.eye(len(y))
    data = site_data(np.arange(len(y)), y)
    result = EP(Probit(), "wasserstein").run(cov, data)
    x_test = np.linspace(-2, 2, 7)[:, None] * np.ones(2)
    cross = kernel.cross(jnp.asarray(x)[None], jnp.asarray(x_test))[0]
    mean, var = predict_latent(cov, cross, kernel.diag(jnp.asarray(x_test))[0], data, result.sites)
    k, ks, q = np.asarray(cov), np.asarray(cross), result.posterior
    a = np.linalg.solve(k, ks)
    np.testing.assert_allclose(mean, a.T @ np.asarray(q.mean), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(var, 2.0 - np.sum(ks * a, 0) + np.sum(a * (np.asarray(q.cov) @ a), 0), rtol=1e-7, atol=1e-10)


@pytest.mark.exhaustive
@pytest.mark.slow
def test_untied_ep_and_qp_fit_and_agree_on_labels():
    """Both maximise the EP evidence above its starting value; the same predicted labels; QP's latent
    variances at the training inputs are not above EP's at common hyper-parameters (Zhang et al. 2020,
    Cor. 2.1)."""
    x, y = _data()
    ep = ExactGPClassifier(max_iter=30).fit(x, y)
    qp = ExactGPClassifier(projection="wasserstein", max_iter=30).fit(x, y)
    start = ExactGPClassifier(max_iter=0).fit(x, y)
    assert ep.log_marginal_likelihood() > start.log_marginal_likelihood()
    assert np.array_equal(ep.predict(x), qp.predict(x))
    assert ep.score(x, y) > 0.85
    with float64():
        cov = _prior_cov(ep.params_.kernel, jnp.asarray(ep.x_train_))
        variances = {name: np.diag(np.asarray(EP(Probit(), name, damping=0.5, schedule="parallel").run(
            cov, ep.site_data_).posterior.cov)) for name in ("kl", "wasserstein")}
    assert np.all(variances["wasserstein"] <= variances["kl"] * (1 + 1e-9))
    assert not np.allclose(variances["wasserstein"], variances["kl"])


def test_bad_settings_are_refused():
    x, y = _data()
    with pytest.raises(ValueError, match="projection must be one of"):
        ExactGPClassifier(projection="l2").fit(x, y)
    with pytest.raises(ValueError, match=r"alpha must lie in \(0, 1\]"):
        ExactGPClassifier(alpha=0.0).fit(x, y)
    with pytest.raises(ValueError, match="exactly two classes"):
        ExactGPClassifier().fit(x, np.arange(len(y)) % 3)


@pytest.mark.heavy
def test_untied_fit_reports_its_iterations_and_warns_when_max_iter_cuts_it_short():
    """``n_iter_``/``converged_`` as every estimator's; a fit stopped by ``max_iter`` raises scikit-learn's
    ``ConvergenceWarning`` at the caller's ``fit`` line, a converged one raises none."""
    x, y = _data()
    with pytest.warns(ConvergenceWarning, match="max_iter=2") as caught:
        short = ExactGPClassifier(max_iter=2).fit(x, y)
    assert caught[0].filename == __file__
    assert (short.n_iter_, short.converged_) == (2, False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        full = ExactGPClassifier().fit(x, y)
    assert full.converged_ and 2 < full.n_iter_ < full.max_iter
    assert full.log_marginal_likelihood() > short.log_marginal_likelihood()


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_the_exact_gp_classifier_takes_a_kernel_and_keeps_its_fixed_values():
    """``kernel=`` a Matérn 5/2 with its lengthscale fixed: a fit keeps the lengthscale bit for bit and moves the
    amplitude; with every value fixed, ``max_iter=0`` gives ``log Z_EP`` of EP run on scikit-learn's Matérn
    Gram matrix of the standardised rows (plus the relative jitter); an unknown spelling is refused."""
    from sklearn.gaussian_process import kernels as sk

    from pep_gp.kernels import Matern52
    from pep_gp.pipeline.training.exact_ep import JITTER

    x, y = _data()
    kernel = Matern52(lengthscales=0.8, variance=1.5, fixed=("lengthscales",))
    model = ExactGPClassifier(kernel=kernel, max_iter=4).fit(x, y)
    np.testing.assert_array_equal(model.kernel_.lengthscales.raw, kernel.bank(1, 2).lengthscales.raw)
    assert abs(float(model.kernel_.variance.value[0]) - 1.5) > 1e-3
    assert repr(model.kernel_).startswith("Matern52(lengthscales=0.8 (fixed), variance=")
    start = ExactGPClassifier(kernel=Matern52(0.8, 1.5, fixed=("lengthscales", "variance")), max_iter=0).fit(x, y)
    xs = (x - start.x_mean_) / start.x_std_
    cov = 1.5 * sk.Matern(0.8, nu=2.5)(xs) + JITTER * 1.5 * np.eye(len(y))
    with float64():
        data = site_data(np.arange(len(y)), y)
        ep = EP(Probit(), "kl", 1.0, damping=0.5, schedule="parallel")
        evidence = float(ep.log_evidence(jnp.asarray(cov), data, ep.run(jnp.asarray(cov), data).sites))
    assert start.log_marginal_likelihood() == pytest.approx(evidence, rel=1e-7)
    assert model.log_marginal_likelihood() > start.log_marginal_likelihood()
    with pytest.raises(ValueError, match=r"ExactGPClassifier: kernel: .*unknown kernel 'matern25'.*did you mean"):
        ExactGPClassifier(kernel="matern25").fit(x, y)


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_repeated_rows_give_the_fit_of_the_distinct_rows():
    """Each row repeated 2–5 times (and one input given both labels): the fit, hyper-parameters and
    probabilities are those of the distinct rows, with a warning counting the left-out copies. Before, the
    evidence of the repeated rows was highest at a lengthscale of ~1e-3 and every probability away from the
    training inputs was ½."""
    x, y = _data()
    x, y = np.vstack([x, x[:1]]), np.append(y, 1 - y[0])  # an input seen with both labels keeps both rows
    copies = np.random.default_rng(0).integers(2, 6, len(y))
    x_test = np.random.default_rng(1).normal(size=(200, 2))
    distinct = ExactGPClassifier().fit(x, y)
    with pytest.warns(UserWarning, match=f"{copies.sum() - len(y)} of {copies.sum()} training rows repeat"):
        repeated = ExactGPClassifier().fit(np.repeat(x, copies, axis=0), np.repeat(y, copies))
    assert distinct.n_repeated_rows_ == 0 and repeated.n_repeated_rows_ == copies.sum() - len(y)
    np.testing.assert_allclose(repeated.predict_proba(x_test), distinct.predict_proba(x_test), atol=1e-6)
    assert np.ptp(repeated.predict_proba(x_test)[:, 1]) > 0.9
