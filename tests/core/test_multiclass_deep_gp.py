"""The multi-class deep GP (:mod:`pep_gp.core.models.multiclass_deep_gp`): its energy against an independent
numpy computation of the same factors (Gauss–Hermite quadrature in place of the ψ-statistics and of the
closed-form probit difference), its limit without a hidden layer (the direct-mode multi-class GP of
Villacampa-Calvo & Hernández-Lobato 2017), its gradient and its predictive."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree
from scipy import special

from pep_gp.core.bank import CholeskyFactor
from pep_gp.core.means import Linear
from pep_gp.core.models.deep_gp import tied_factor
from pep_gp.core.models.multiclass import MultiClassGP, MultiClassParams
from pep_gp.core.models.multiclass_deep_gp import CLASS_NOISE, ClassPairs, MultiClassDeepGP
from pep_gp.core.psi_statistics import uncertain_input_marginals
from tests import oracles

CLASSES = 3


def _problem(hidden, n=12, num_inducing=4, seed=0):
    """Three classes on two inputs, and parameters away from their start (every leaf perturbed)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2))
    y = np.argmax(x @ rng.normal(size=(2, CLASSES)) + 0.5 * rng.normal(size=(n, CLASSES)), axis=1)
    y[:CLASSES] = np.arange(CLASSES)  # every class present
    model = MultiClassDeepGP(ClassPairs(CLASSES))
    params = model.init(x, hidden_dims=hidden, num_inducing=num_inducing, seed=seed,
                        likelihood_params=ClassPairs(CLASSES).init_params(0.3))
    flat, unravel = ravel_pytree(params)
    params = unravel(flat + 0.2 * jnp.asarray(rng.normal(size=flat.shape)))
    return model, params, jnp.asarray(x), jnp.asarray(y, dtype=float)


# ------------------------------------------------------------------------------------------------ numpy oracle
def _numpy_gps(layer, jitter, last):
    """The GPs of one layer as numpy: SE kernel, Z, the diagonal added to K_uu and κ, and the tied factor
    ``(η, Λ)`` from its stored form (strict lower part, log diagonal)."""
    ell = np.exp(np.broadcast_to(np.asarray(layer.kernel.lengthscales.raw), layer.inducing.shape[::2]))
    sf2 = np.exp(np.broadcast_to(np.asarray(layer.kernel.variance.raw), layer.inducing.shape[:1]))
    diagonal = jitter * sf2 + (np.exp(np.asarray(layer.likelihood[CLASS_NOISE])) if last else 0.0)
    raw = np.asarray(layer.factor_chol)
    chol = np.tril(raw, -1) + np.exp(np.diagonal(raw, axis1=-2, axis2=-1))[..., None] * np.eye(raw.shape[-1])
    return [dict(ell=ell[g], sf2=sf2[g], z=np.asarray(layer.inducing[g]), d=diagonal[g],
                 eta=np.asarray(layer.factor_shift[g]), lam=chol[g] @ chol[g].T) for g in range(len(sf2))]


def _numpy_gaussian(gp, scale):
    """``p·t^scale`` over u: mean, covariance, and its log-normaliser ``½log|V| + ½mᵀV⁻¹m`` (and the prior's)."""
    kuu = oracles.se_kernel(gp["z"], gp["z"], gp["ell"], gp["sf2"]) + gp["d"] * np.eye(len(gp["z"]))
    precision = np.linalg.inv(kuu) + scale * gp["lam"]
    cov = np.linalg.inv(precision)
    mean = cov @ (scale * gp["eta"])
    return mean, cov, 0.5 * np.linalg.slogdet(cov)[1] + 0.5 * mean @ precision @ mean, kuu


def _numpy_conditional(gp, u_mean, u_cov, kuu, h):
    """Mean and variance of the GP's output at fixed inputs ``h`` ``[S, D]`` with ``u ~ N(u_mean, u_cov)``."""
    k = oracles.se_kernel(h, gp["z"], gp["ell"], gp["sf2"])
    a = np.linalg.solve(kuu, k.T).T
    return a @ u_mean, gp["sf2"] + gp["d"] - np.sum(a * k, 1) + np.sum((a @ u_cov) * a, 1)


def numpy_energy(model, params, x, y, nodes=40):
    """The boxed energy of Bui et al. (2016, §4.2) with pair factors, one hidden layer: cavities in numpy,
    the hidden layer's diagonal Gaussian integrated by a tensor Gauss–Hermite grid (law of total variance),
    and each factor ``∫ N(f; m_y, v_y) Φ((f − m_k)/√v_k) df`` by Gauss–Hermite."""
    x, y = np.asarray(x), np.asarray(y).astype(int)
    n, freq = len(y), np.bincount(y, minlength=CLASSES) / len(y)
    hidden_layer, output_layer = params.layers
    hidden = _numpy_gps(hidden_layer, model.jitter, last=False)
    output = _numpy_gps(output_layer, model.jitter, last=True)
    counts = [n * (CLASSES - 1.0)] * len(hidden) + list(n * (1.0 + (CLASSES - 2) * freq))
    energy, cavities = 0.0, []
    for gp, count in zip(hidden + output, counts):
        *_, log_q, _ = _numpy_gaussian(gp, 1.0)
        u_mean, u_cov, log_cavity, kuu = _numpy_gaussian(gp, 1.0 - 1.0 / count)
        energy += log_q - 0.5 * np.linalg.slogdet(kuu)[1] + count * (log_cavity - log_q)
        cavities.append((u_mean, u_cov, kuu))
    first = [_numpy_conditional(gp, *cav, x) for gp, cav in zip(hidden, cavities)]
    noise = np.logaddexp(0.0, np.asarray(hidden_layer.likelihood["raw_noise_variance"]))  # softplus
    t, w = np.polynomial.hermite_e.hermegauss(nodes)
    grid = np.stack(np.meshgrid(t, t, indexing="ij"), -1).reshape(-1, 2)
    weights = np.outer(w, w).reshape(-1) / (2 * np.pi)
    f, fw = np.polynomial.hermite_e.hermegauss(2 * nodes)
    for row in range(n):
        h_mean = np.array([m[row] for m, _ in first])
        h_sd = np.sqrt(np.array([v[row] for _, v in first]) + noise)
        h = h_mean + h_sd * grid
        moments = [_numpy_conditional(gp, *cav, h) for gp, cav in zip(output, cavities[len(hidden):])]
        mean = np.array([weights @ m for m, _ in moments])
        var = np.array([weights @ (v + m**2) for m, v in moments]) - mean**2
        label = y[row]
        for k in range(CLASSES):
            if k != label:
                values = special.ndtr((mean[label] + np.sqrt(var[label]) * f - mean[k]) / np.sqrt(var[k]))
                energy += np.log(fw @ values / np.sqrt(2 * np.pi))
    return energy


@pytest.mark.heavy
def test_energy_matches_an_independent_numpy_computation():
    model, params, x, y = _problem((2,))
    energy = float(jax.jit(model.energy)(params, x, y))
    expected = numpy_energy(model, params, x, y)
    assert abs(energy - expected) <= 1e-8 * max(1.0, abs(expected))


# ------------------------------------------------------------------------------------------------ limits
def _without_a_hidden_layer():
    """A model without a hidden layer and :class:`~pep_gp.core.models.multiclass.MultiClassGP` in direct mode with
    the same kernels, noises and tied factors."""
    model, params, x, y = _problem(())
    (layer,) = params.layers
    same = MultiClassParams(kernel=layer.kernel, raw_noise=layer.likelihood[CLASS_NOISE], inducing=layer.inducing,
                            factor=CholeskyFactor(*tied_factor(layer)))
    return model, params, MultiClassGP(CLASSES, jitter=model.jitter), same, x, y


@pytest.mark.heavy
def test_without_a_hidden_layer_it_is_the_direct_multiclass_gp():
    """No hidden layer (the identity map, no noise): the energy is the multi-class GP's."""
    model, params, reference, same, x, y = _without_a_hidden_layer()
    energy, expected = float(jax.jit(model.energy)(params, x, y)), float(jax.jit(reference.energy)(same, x, y))
    assert abs(energy - expected) <= 1e-12 * abs(expected)


@pytest.mark.heavy
def test_an_identity_hidden_layer_without_noise_gives_the_one_layer_model():
    """The output layer of a width-2 model fed the rows themselves as a Gaussian of zero variance (the ψ path:
    a hidden layer fixed to the identity map, no hidden noise) gives the data term and the output GPs'
    cavities of the one-layer model made of that output layer (whose energy is the multi-class GP's, above)."""
    model, params, x, y = _problem((2,))

    @jax.jit
    def both(params):
        n, one = x.shape[0], params._replace(layers=params.layers[1:])
        size = model.data_size(y)
        output, alone = model.step_shared(params, size).layers[1], model.step_shared(one, size)
        identity = uncertain_input_marginals(model.layer_bank(params.layers[1]), output.gaussian, output.pairs, x,
                                             jnp.zeros_like(x))
        return (jnp.sum(model.likelihood.log_tilted({}, y, identity.mean, identity.var)),
                model.data_energy(one, alone, x, y, jnp.ones(n, bool)),
                output.gaussian.log_normaliser, alone.layers[0].gaussian.log_normaliser)

    through_identity, one_layer, identity_cavities, one_layer_cavities = both(params)
    np.testing.assert_allclose(through_identity, one_layer, rtol=1e-10)
    np.testing.assert_allclose(identity_cavities, one_layer_cavities, rtol=1e-12)


@pytest.mark.exhaustive
@pytest.mark.slow
def test_predictive_probabilities_are_eq_68_on_the_propagated_moments():
    """Without a hidden layer, the multi-class GP's predictive; with one, eq. (68) by ``scipy.integrate.quad``."""
    model, params, reference, same, x, _ = _without_a_hidden_layer()
    np.testing.assert_allclose(jax.jit(model.predict)(params, x), jax.jit(reference.predict)(same, x), rtol=1e-12)
    model, params, x, _ = _problem((2,))
    log_proba = np.asarray(jax.jit(model.predict)(params, x[:3]))
    mean, var = (np.asarray(v) for v in jax.jit(model.predict_f)(params, x[:3]))
    for row in range(3):
        np.testing.assert_allclose(np.exp(log_proba[row]),
                                   oracles.multiclass_predictive_probabilities(mean[row], var[row]), atol=1e-9)


@pytest.mark.exhaustive
@pytest.mark.slow
def test_energy_gradient_matches_central_differences():
    model, params, x, y = _problem((2,), n=6, num_inducing=3)
    flat, unravel = ravel_pytree(params)
    energy = lambda v: model.energy(unravel(v), x, y)
    oracles.assert_gradient_matches_central_differences(energy, jax.grad(energy), flat, eps=1e-6)


@pytest.mark.parametrize("classes, kwargs, message", [
    (3, {"alpha": 0.5}, "alpha = 1 only"),
    (1, {}, "ClassPairs of at least 2 classes"),
    (3, {"mixture_samples": -1}, r"mixture_samples must be 0 \(the moment predictive\) or a number of paths; got -1"),
    (3, {"quadrature_points": 1}, "quadrature_points must be at least 2")])  # the deep GP's own checks too
def test_bad_settings_are_refused(classes, kwargs, message):
    with pytest.raises(ValueError, match=message):
        MultiClassDeepGP(ClassPairs(classes), **kwargs)


def test_a_regressors_y_mixture_is_refused_by_name():
    model = MultiClassDeepGP(ClassPairs(CLASSES))
    for method in (model.predict_y_mixture, model.mixture_moments):
        with pytest.raises(NotImplementedError, match="a multi-class deep GP gives its classes' probabilities under "
                                                      "the mixture with mixture_log_proba"):
            method(None, None, jax.random.key(0), 2)


# ------------------------------------------------------------------------------------------------ mixture
def _numpy_marginals(gps, h):
    """Means and variances ``[S, G]`` of the GPs ``gps`` (:func:`_numpy_gps`) at the inputs ``h`` ``[S, D]`` under ``q``."""
    moments = []
    for gp in gps:
        u_mean, u_cov, _, kuu = _numpy_gaussian(gp, 1.0)
        moments.append(_numpy_conditional(gp, u_mean, u_cov, kuu, h))
    return np.stack([m for m, _ in moments], 1), np.stack([v for _, v in moments], 1)


def _with_a_linear_mean(hidden):
    """:func:`_problem` whose classes' output GPs have linear means far from zero, one per class."""
    model, params, x, y = _problem(hidden, n=6)
    dims = params.layers[-1].inducing.shape[-1]
    weights = np.linspace(-1.5, 1.5, CLASSES * dims).reshape(CLASSES, dims)
    return model, params._replace(mean=Linear(weights=weights, bias=[1.0, -0.5, 0.0]).stacked(CLASSES, dims)), x, y


@pytest.mark.heavy
def test_without_a_hidden_layer_the_mixture_is_the_moment_predictive():
    """No hidden layer: every path is the same Gaussian per class, numpy's output GPs at the rows plus the linear
    means (whose values are far from zero: a dropped mean fails), so the mixture's class probabilities are eq. (68)
    on the moments (:meth:`predict`), to 1e-12."""
    model, params, x, y = _with_a_linear_mean(())

    @jax.jit
    def predictions(params):
        key = jax.random.key(0)
        return (model.predict_mixture(params, x, key, 3), model.mixture_log_proba(params, x, key, 3),
                model.mixture_log_density(params, x, y, key, 3), model.predict(params, x))

    mixture, log_proba, density, expected = predictions(params)
    mean, var = _numpy_marginals(_numpy_gps(params.layers[0], model.jitter, last=True), np.asarray(x))
    linear = np.asarray(x) @ np.asarray(params.mean.weights).T + np.asarray(params.mean.bias)
    assert np.min(np.max(np.abs(linear), axis=0)) > 0.5
    for component in range(3):
        np.testing.assert_allclose(mixture.mean[component], mean + linear, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(mixture.var[component], var, rtol=1e-9)
    np.testing.assert_allclose(log_proba, expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(density, np.take_along_axis(expected, np.asarray(y, int)[:, None], 1)[:, 0],
                               rtol=1e-12, atol=1e-12)


def numpy_nested_sampling(model, params, x, paths, seed=0):
    """``p(y = c | x)`` ``[B, C]`` of a one-hidden-layer model by brute force in numpy: per row, ``paths`` draws of
    the hidden layer's outputs ``h ~ N(m(x), v(x) + σ²)`` under ``q``, then of every class's ``f_c`` from its GP at
    ``h`` (with its linear mean), the label the argmax; the frequency and its binomial standard error."""
    rng = np.random.default_rng(seed)
    hidden_layer, output_layer = params.layers
    hidden = _numpy_gps(hidden_layer, model.jitter, last=False)
    output = _numpy_gps(output_layer, model.jitter, last=True)
    noise = np.logaddexp(0.0, np.asarray(hidden_layer.likelihood["raw_noise_variance"]))  # softplus
    weights, bias = np.asarray(params.mean.weights), np.asarray(params.mean.bias)
    probabilities = []
    for row in np.asarray(x):
        mean, var = _numpy_marginals(hidden, row[None])
        h = mean + np.sqrt(var + noise) * rng.normal(size=(paths, len(hidden)))
        mean, var = _numpy_marginals(output, h)
        f = mean + h @ weights.T + bias + np.sqrt(var) * rng.normal(size=var.shape)
        probabilities.append(np.bincount(np.argmax(f, axis=1), minlength=CLASSES) / paths)
    probabilities = np.array(probabilities)
    return probabilities, np.sqrt(probabilities * (1 - probabilities) / paths)


@pytest.mark.heavy
def test_with_a_hidden_layer_the_mixture_matches_nested_sampling():
    """One hidden layer of width 2 and linear class means: the class probabilities of the mixture (4,000 paths,
    eq. 68 on each) against numpy's nested sampling of the same model (100,000 paths, a label drawn on each),
    within 4 standard errors of the two estimates together (a path's probability lies in [0, 1], so its variance
    is at most ``p(1 − p)``). The moment predictive (eq. 68 on one forward pass) is 5–50 such errors away."""
    model, params, x, _ = _with_a_linear_mean((2,))
    x, samples = x[:3], 4_000
    log_proba = jax.jit(model.mixture_log_proba, static_argnums=3)(params, x, jax.random.key(5), samples)
    probabilities = np.exp(np.asarray(log_proba))
    expected, expected_error = numpy_nested_sampling(model, params, x, 100_000)
    error = np.sqrt(probabilities * (1 - probabilities) / samples + expected_error**2)
    assert np.all(np.abs(probabilities - expected) < 4 * error)
