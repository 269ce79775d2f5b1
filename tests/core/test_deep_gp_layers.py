"""A deep GP specified layer by layer (issue 65): the multi-class deep GP's per-class output means (their moments
through a hidden layer against Gauss–Hermite quadrature of the hidden layer's exact Gaussian; without a hidden
layer the direct multi-class GP with the same means), a kernel of its own in each layer (the MAP term is scipy's
log density of the values of the layer whose kernel has a prior, and of no other), and priors on the layers'
Gaussian noise (scipy's log density of every layer's noise with the softplus's Jacobian)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special, stats

from pep_gp.core import means
from pep_gp.core.kernels import Matern52, SquaredExponential
from pep_gp.core.likelihoods import Gaussian
from pep_gp.core.models.deep_gp import DeepGP
from pep_gp.core.priors import Gamma, LogNormal
from pep_gp.core.psi_statistics import fixed_input_marginals
from tests.core.test_multiclass_deep_gp import CLASSES, _problem, _without_a_hidden_layer

PER_CLASS = means.Linear(weights=[[0.7, -1.2], [0.0, 0.5], [-0.4, 0.3]], bias=[0.3, -0.2, 0.1])


def _quadrature_moments(model, params, x, nodes=24):
    """Every class's mean and variance ``[B, C]`` of ``f_c = m_c(h) + g_c(h)`` for ``h`` the width-2 hidden layer's
    exact Gaussian (its moments and noise), by a ``nodes × nodes`` Gauss–Hermite grid over ``h`` and the output GPs'
    exact moments given ``h``."""
    inputs = model.posteriors(params)
    first = fixed_input_marginals(model.layer_bank(params.layers[0]), inputs[0].prior, inputs[0].gaussian, x)
    scale = jnp.sqrt(2 * (first.var + Gaussian.noise_variance(params.layers[0].likelihood)))
    t, w = np.polynomial.hermite.hermgauss(nodes)
    grid = np.stack(np.meshgrid(t, t, indexing="ij"), -1).reshape(-1, 2)
    hidden = first.mean[:, None, :] + scale[:, None, :] * grid[None]  # [B, Q, 2]
    out = fixed_input_marginals(model.layer_bank(params.layers[1]), inputs[1].prior, inputs[1].gaussian,
                                hidden.reshape(-1, 2))
    weights = jnp.asarray(np.outer(w, w).reshape(-1) / np.pi)[None, :, None]
    f_mean = out.mean.reshape(*hidden.shape[:2], -1) + params.mean.each(hidden.reshape(-1, 2)).reshape(
        *hidden.shape[:2], -1)
    mean = jnp.sum(weights * f_mean, axis=1)
    return mean, jnp.sum(weights * (out.var.reshape(f_mean.shape) + f_mean**2), axis=1) - mean**2


@pytest.mark.heavy  # the pass with two forward-mode directions and the quadrature compiled: 33 s on 2 shared cores
def test_per_class_linear_means_through_a_hidden_layer_match_quadrature():
    """Hidden width 2, three classes each with its own ``w_cᵀh + b_c``: the propagated moments equal 24² Gauss–Hermite
    nodes over the hidden layer to 1e-6 (exact for two layers); the means' spread and covariance with the GP count
    (the variances differ from the zero mean's)."""
    model, params, x, _ = _problem((2,))
    x = x[:3]
    with_mean = params._replace(mean=PER_CLASS.stacked(CLASSES, 2))
    mean, var = (np.asarray(v) for v in jax.jit(model.predict_f)(with_mean, x))
    quad_mean, quad_var = (np.asarray(v) for v in jax.jit(_quadrature_moments, static_argnums=0)(model, with_mean, x))
    np.testing.assert_allclose(mean, quad_mean, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(var, quad_var, rtol=1e-6, atol=1e-8)
    zero_mean, zero_var = (np.asarray(v) for v in jax.jit(model.predict_f)(params, x))
    assert np.all(np.abs(var - zero_var) > 1e-3)


@pytest.mark.heavy  # two energies and predictives compiled: 30 s on 2 shared cores
def test_without_a_hidden_layer_per_class_means_are_the_direct_multiclass_gps():
    """No hidden layer: the energy and the predictive with a linear mean per class are the direct multi-class GP's
    with the same means (its ``params.mean``, :meth:`~pep_gp.core.means.MeanFunction.stacked`)."""
    model, params, reference, same, x, y = _without_a_hidden_layer()
    stacked = PER_CLASS.stacked(CLASSES, 2)
    params, same = params._replace(mean=stacked), same._replace(mean=stacked)
    energy, expected = float(jax.jit(model.energy)(params, x, y)), float(jax.jit(reference.energy)(same, x, y))
    assert energy == pytest.approx(expected, rel=1e-12)
    np.testing.assert_allclose(jax.jit(model.predict)(params, x), jax.jit(reference.predict)(same, x), rtol=1e-10)


def test_init_gives_each_class_its_own_copy_of_the_mean():
    model, _, x, _ = _problem(())
    params = model.init(np.asarray(x), (2,), 4, mean=means.Linear(weights=[1.0, 2.0]))
    assert params.mean.weights.shape == (CLASSES, 2) and params.mean.bias.shape == (CLASSES,)


@pytest.mark.heavy  # two global terms compiled: 6-8 s on 2 shared cores
def test_a_kernel_per_layer_puts_its_prior_on_its_own_layer_only():
    """``kernel=[Matern52(prior=…), SquaredExponential()]``: layer 1 is a Matérn, layer 2 a squared exponential, and the
    objective with the prior less the objective without is scipy's log density of layer 1's values only (with the
    stored logarithm's Jacobian)."""
    x = jnp.asarray(np.random.default_rng(0).normal(size=(12, 2)))
    model = DeepGP(Gaussian())
    prior = {"lengthscales": Gamma(2.0, 1.5)}
    plain = model.init(x, (2,), 4, kernel=[Matern52(), SquaredExponential()])
    with_prior = model.init(x, (2,), 4, kernel=[Matern52(prior=prior), SquaredExponential()])
    assert [type(layer.kernel) for layer in with_prior.layers] == [Matern52, SquaredExponential]
    shared = jax.jit(model.step_shared)(plain, x.shape[0])
    energy = jax.jit(model.global_energy)
    difference = float(energy(with_prior, shared, x.shape[0]) - energy(plain, shared, x.shape[0]))
    lengthscales = np.exp(np.asarray(plain.layers[0].kernel.lengthscales.raw))
    expected = np.sum(stats.gamma(a=2.0, scale=1 / 1.5).logpdf(lengthscales) + np.log(lengthscales))
    assert difference == pytest.approx(expected, abs=1e-10)
    with pytest.raises(ValueError, match=r"one kernel for every layer, or a list of one per layer \(2: the 1 hidden "
                                         r"layers' then the output's\); got a list of 3"):
        model.init(x, (2,), 4, kernel=[Matern52()] * 3)


@pytest.mark.heavy  # two global terms compiled: 6-8 s on 2 shared cores
def test_a_noise_prior_adds_scipys_log_density_of_every_layers_noise():
    """``priors=(("raw_noise_variance", LogNormal(…)),)``: the energy with it less the energy without is scipy's
    log-normal density of the hidden layer's and the output's noise variance, plus the softplus's log slope at each
    stored value; the energy without it keeps its bits."""
    x = jnp.asarray(np.random.default_rng(1).normal(size=(12, 2)))
    plain, with_prior = DeepGP(Gaussian()), DeepGP(Gaussian(), priors=(("raw_noise_variance", LogNormal(-2.0, 0.7)),))
    params = plain.init(x, (2,), 4, noise_variance=0.05)
    shared = jax.jit(plain.step_shared)(params, x.shape[0])
    difference = float(jax.jit(with_prior.global_energy)(params, shared, x.shape[0])
                       - jax.jit(plain.global_energy)(params, shared, x.shape[0]))
    raw = np.array([float(layer.likelihood["raw_noise_variance"]) for layer in params.layers])
    expected = np.sum(stats.lognorm(s=0.7, scale=np.exp(-2.0)).logpdf(np.logaddexp(0.0, raw)) + np.log(special.expit(raw)))
    assert difference == pytest.approx(expected, abs=1e-10)


def test_one_kernel_is_every_layers_as_a_list_of_it_is():
    """``kernel=k`` and ``kernel=[k, k]`` start the same state to the bit (and None, the default, as ``[None, None]``)."""
    x = np.random.default_rng(2).normal(size=(12, 2))
    model = DeepGP(Gaussian())
    for one, each in ((Matern52(), [Matern52(), Matern52()]), (None, [None, None])):
        for leaf, same in zip(jax.tree_util.tree_leaves(model.init(x, (2,), 4, kernel=one)),
                              jax.tree_util.tree_leaves(model.init(x, (2,), 4, kernel=each))):
            np.testing.assert_array_equal(leaf, same)
