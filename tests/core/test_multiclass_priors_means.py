"""Priors and mean functions of the multi-class GP (issue 65): a kernel's prior adds scipy's log density of the
stored values (once per class), a prior on the classes' noises that of every ``σ_{0,c}`` (the SEP, direct, untied
and deep multi-class models' energies); a mean common to all classes changes nothing but the latent means, since every
multi-class likelihood sees the latents' differences only; per-class means are the zero-mean model with each
class's latent shifted inside the likelihood; far from the data the latents revert to their means."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from pep_gp.core import float64
from pep_gp.core import means
from pep_gp.core.kernels import SquaredExponential
from pep_gp.core.bank import NaturalFactor
from pep_gp.core.models import multiclass_ep
from pep_gp.core.models.multiclass import MultiClassGP
from pep_gp.core.models.multiclass_deep_gp import CLASS_NOISE, ClassPairs, MultiClassDeepGP
from pep_gp.core.parameters import LOG
from pep_gp.core.priors import Gamma, LogNormal

CLASSES, ROWS = 3, 30


@pytest.fixture(scope="module")
def rows():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROWS, 2))
    return x, np.argmax(x @ np.ones((2, CLASSES)) + 0.5 * rng.normal(size=(ROWS, CLASSES)), 1)


def started(model, x, y, factor, **init):
    """The model's start, its natural tied factor moved off zero by one damped site update (so that the cavities
    are not the prior)."""
    params = model.init(x, 5, factor=factor, **init)
    return moved(model, params, x, y) if factor == "natural" else params


@partial(jax.jit, static_argnums=0)
def moved(model, params, x, y):
    sizes = model.data_size(y)
    shared = model.step_shared(params, sizes)
    return model.site_update(params, shared, model.site_stats(params, shared, x, y, jnp.ones(ROWS, bool)), sizes, 0.5)[0]


@partial(jax.jit, static_argnums=0)
def outputs(model, params, x, y):
    """The energy, the site statistics (a natural factor's; None for a Cholesky one), the latent moments and the
    class log-probabilities at the rows: one compiled program per model and params' structure."""
    shared = model.step_shared(params, model.data_size(y))
    natural = isinstance(params.factor, NaturalFactor)
    stats = model.site_stats(params, shared, x, y, jnp.ones(ROWS, bool)) if natural else None
    return model.energy(params, x, y), stats, model.predict_latent(params, x), model.predict(params, x)


NOISE = np.array([0.3, 0.7, 1.5])  # σ_{0,c}, where the class-noise prior's density is taken


def class_noise_log_density():
    """scipy's ``Σ_c log p_θ(σ_{0,c}) + log σ_{0,c}`` of :data:`NOISE` under Gamma(2, 3) (its log's Jacobian added)."""
    return np.sum(stats.gamma(a=2.0, scale=1 / 3.0).logpdf(NOISE) + np.log(NOISE))


@pytest.mark.parametrize("factor", ["natural", pytest.param("cholesky", marks=pytest.mark.heavy)])
def test_kernel_and_class_noise_priors_add_scipys_log_density_of_every_classs_values(rows, factor):
    """``F(θ) + Σ_c log p(r_c)`` with ``log p(r) = log p_θ(e^r) + r`` (:mod:`pep_gp.core.priors`), summed over the
    C classes' lengthscales and amplitudes (the kernel's ``prior=``) and their noises ``σ_{0,c}`` (the model's
    ``priors=(("raw_noise", prior, exp),)``)."""
    kernel = SquaredExponential(prior={"lengthscales": Gamma(2.0, 1.5), "variance": LogNormal(0.2, 0.7)})
    with float64():
        x, y = jnp.asarray(rows[0]), jnp.asarray(rows[1])
        model = MultiClassGP(CLASSES)
        params = started(model, x, y, factor, kernel=kernel)._replace(raw_noise=jnp.log(NOISE))
        plain = params._replace(kernel=jax.tree_util.tree_unflatten(
            jax.tree_util.tree_structure(SquaredExponential().bank(CLASSES, 2, np.ones(2))),
            jax.tree_util.tree_leaves(params.kernel)))
        with_priors = MultiClassGP(CLASSES, priors=(("raw_noise", Gamma(2.0, 3.0), LOG.forward),))
        difference = float(outputs(with_priors, params, x, y)[0] - outputs(model, plain, x, y)[0])
    lengthscales = np.asarray(params.kernel.lengthscales.raw)
    variances = np.asarray(params.kernel.variance.raw)
    assert lengthscales.shape == (CLASSES, 2) and variances.shape == (CLASSES,)
    expected = (np.sum(stats.gamma(a=2.0, scale=1 / 1.5).logpdf(np.exp(lengthscales)) + lengthscales)
                + np.sum(stats.lognorm(s=0.7, scale=np.exp(0.2)).logpdf(np.exp(variances)) + variances)
                + class_noise_log_density())
    assert difference == pytest.approx(expected, abs=1e-10)


@pytest.mark.heavy
@pytest.mark.exhaustive  # two global terms compiled per model: ~10 s at a load of 4 on 2 cores
@pytest.mark.parametrize("kind", ["untied", "deep"])
def test_a_class_noise_prior_adds_scipys_log_density_to_the_untied_and_deep_global_terms(rows, kind):
    """As above for the untied model's global term (``priors`` on ``raw_noise``) and the deep multi-class GP's
    (``priors`` on its output layer's ``raw_class_noise``)."""
    prior = Gamma(2.0, 3.0)
    with float64():
        x, y = jnp.asarray(rows[0]), jnp.asarray(rows[1])
        sizes = MultiClassGP(CLASSES).data_size(y)
        if kind == "deep":
            plain, with_prior = (MultiClassDeepGP(ClassPairs(CLASSES), priors=priors)
                                 for priors in ((), ((CLASS_NOISE, prior, LOG.forward),)))
            params = plain.init(x, (), 5, likelihood_params={CLASS_NOISE: jnp.log(NOISE)})
        else:
            plain, with_prior = MultiClassGP(CLASSES), MultiClassGP(CLASSES, priors=(("raw_noise", prior, LOG.forward),))
            params = plain.init(x, 5)._replace(raw_noise=jnp.log(NOISE))

        @jax.jit
        def difference(params):
            if kind == "untied":
                return multiclass_ep.global_energy(with_prior, params) - multiclass_ep.global_energy(plain, params)
            shared = plain.step_shared(params, sizes)
            return with_prior.global_energy(params, shared, sizes) - plain.global_energy(params, shared, sizes)

        assert float(difference(params)) == pytest.approx(class_noise_log_density(), abs=1e-10)


@pytest.mark.parametrize("likelihood, factor", [
    ("pairwise", "natural"), pytest.param("pairwise", "cholesky", marks=pytest.mark.heavy),
    *(pytest.param(likelihood, factor, marks=[pytest.mark.heavy, pytest.mark.exhaustive])  # a whole-row likelihood
      for likelihood in ("exact", "softmax") for factor in ("natural", "cholesky"))])  # compiled: 6-16 s idle
def test_a_mean_common_to_the_classes_shifts_the_latents_and_changes_nothing_else(rows, likelihood, factor):
    """The pairwise probits, the probability of the maximum and the softmax depend on ``f_c − f_k`` only: with
    every class's prior mean ``c`` the energy, the sites (in ``g = f − m``) and the class probabilities are the
    zero mean's, and the latent means are shifted by exactly ``c`` (variances unchanged)."""
    with float64():
        x, y = jnp.asarray(rows[0]), jnp.asarray(rows[1])
        model = MultiClassGP(CLASSES, likelihood=likelihood)
        zero = started(model, x, y, factor)
        common = zero._replace(mean=means.Constant(0.7).stacked(CLASSES, 2))
        energy, stats_common, (mean, var), log_proba = outputs(model, common, x, y)
        energy0, stats_zero, (mean0, var0), log_proba0 = outputs(model, zero, x, y)
    assert float(energy) == pytest.approx(float(energy0), abs=1e-10)
    for got, want in zip(jax.tree_util.tree_leaves(stats_common), jax.tree_util.tree_leaves(stats_zero), strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)
    assert (stats_zero is None) == (factor == "cholesky")
    np.testing.assert_allclose(mean, mean0 + 0.7, rtol=0, atol=1e-14)
    np.testing.assert_array_equal(var, var0)
    np.testing.assert_allclose(log_proba, log_proba0, rtol=0, atol=1e-10)


@pytest.mark.heavy  # its oracle runs op by op: ~4 s
def test_per_class_means_are_the_zero_mean_model_with_each_latent_shifted_inside_the_likelihood(rows):
    """``Constant([c_1, c_2, c_3])``: the energy is ``G`` plus the zero-mean model's row term at its cavity's
    marginals plus ``c`` (to 1e-10); far from the data every latent reverts to its class's constant."""
    constants = np.array([0.4, -0.9, 1.3])
    with float64():
        x, y, mask = jnp.asarray(rows[0]), jnp.asarray(rows[1]), jnp.ones(ROWS, bool)
        model = MultiClassGP(CLASSES)
        zero = started(model, x, y, "natural")
        shifted = zero._replace(mean=means.Constant(constants).stacked(CLASSES, 2))
        sizes = model.data_size(y)
        shared = model.step_shared(zero, sizes)
        marginals, fitc = model.class_marginals(model.block_rows(zero, shared, x), shared.cavity)
        oracle = (model.global_energy(zero, shared, sizes)
                  + model.row_energy(marginals._replace(mean=marginals.mean + constants), fitc, y, mask))
        energy = float(outputs(model, shifted, x, y)[0])
        assert energy == pytest.approx(float(oracle), abs=1e-10)
        assert energy != pytest.approx(float(outputs(model, zero, x, y)[0]), abs=1e-3)
        far = outputs(model, shifted, x + 40.0, y)[2][0]  # ~40 lengthscales away: the prior's mean
    np.testing.assert_allclose(far, np.broadcast_to(constants, far.shape), atol=1e-8)


def test_a_stacked_mean_gives_each_class_its_own_parameters_and_refuses_another_shape():
    with float64():
        linear = means.Linear(weights=[0.5, -1.0], bias=0.2).stacked(CLASSES, 2)
        assert linear.weights.shape == (CLASSES, 2) and linear.bias.shape == (CLASSES,)
        own = means.Constant([1.0, 2.0, 3.0]).stacked(CLASSES, 2)
        x = jnp.asarray([[0.0, 1.0], [2.0, 0.0]])
        np.testing.assert_array_equal(own.each(x), [[1.0, 2.0, 3.0]] * 2)
        np.testing.assert_allclose(linear.each(x), np.broadcast_to((x @ jnp.asarray([0.5, -1.0]) + 0.2)[:, None],
                                                                   (2, CLASSES)), rtol=1e-15)
        np.testing.assert_allclose(linear.each(x), linear(x), rtol=1e-15)  # the fitted object itself: [B, C]
        assert means.Zero().stacked(CLASSES, 2).each(x) is None
    with pytest.raises(ValueError, match=r"constant needs shape \(\) .* or \(3,\) .*got \(2,\)"):
        means.Constant([1.0, 2.0]).stacked(CLASSES, 2)


@means.register_mean("test-multiclass-quadratic")
class Quadratic(means.MeanFunction):
    """``a·x₀² + c``: a user's own mean, as the docs show it."""

    parameters = ("a", "c")

    def __call__(self, x):
        return self.a * x[:, 0] ** 2 + self.c


def test_a_users_stacked_mean_read_in_the_datas_units_is_each_classs_own():
    """A user's mean has no closed form in the data's units: its reading for each latent
    (:meth:`~pep_gp.core.means.InDataUnits.for_each_latent`) is ``m_c((x − x_mean)/x_std)`` of every class's own
    parameters, ``[B, C]``."""
    x = np.array([[1.0, 4.0], [3.0, -2.0], [0.5, 0.0]])
    x_mean, x_std = np.array([1.0, 0.5]), np.array([2.0, 3.0])
    with float64():
        stacked = Quadratic(a=0.0, c=0.0).stacked(CLASSES, 2).replace(a=jnp.asarray([1.0, -2.0, 0.5]),
                                                                      c=jnp.asarray([0.1, 0.2, 0.3]))
    reading = stacked.in_data_units(x_mean, x_std).for_each_latent()
    z = (x - x_mean) / x_std
    expected = np.stack([a * z[:, 0] ** 2 + c for a, c in zip([1.0, -2.0, 0.5], [0.1, 0.2, 0.3])], axis=1)
    np.testing.assert_allclose(reading(x), expected, rtol=1e-14)
