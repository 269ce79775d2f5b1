"""The sparse-GP bank's Gaussians, linear algebra, kernels and the positive bijections."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
import scipy.special
import scipy.stats
from scipy.stats import multivariate_normal

from pep_gp.core import bank, gaussian
from pep_gp.core.kernels import SquaredExponential
from pep_gp.core.linalg import cholesky, logdet_from_cholesky
from pep_gp.core.models.collapsed_regression import RegressionParams
from pep_gp.core.models.multiclass import MultiClassParams
from pep_gp.core.parameters import (constrained, log_of_positive, positive, positive_from_log, unconstrain_positive,
                               unconstrained)
from tests import oracles


def _random_spd(rng, m):
    a = rng.normal(size=(m, m))
    return a @ a.T + m * np.eye(m)


@pytest.mark.heavy
@pytest.mark.parametrize("form", ["natural", "cholesky"])
def test_bank_gaussians_match_dense_natural_parameters(form):
    """``p_g·t_g^s`` of the bank (whitened form) against the dense natural-parameter formulas:
    precision ``K⁻¹ + sΛ``, mean ``(K⁻¹ + sΛ)⁻¹sη`` and ``φ(q) − φ(p) = ½hᵀP⁻¹h − ½log|P| − ½log|K|``."""
    rng = np.random.default_rng(0)
    gram = np.stack([_random_spd(rng, 4) for _ in range(2)])
    roots = rng.normal(size=(2, 4, 4))
    shift, scale = rng.normal(size=(2, 4)), np.array([1.0, 0.3])
    precision = roots @ np.swapaxes(roots, 1, 2)
    factor = (bank.NaturalFactor(jnp.asarray(shift), jnp.asarray(precision)) if form == "natural"
              else bank.CholeskyFactor(jnp.asarray(shift), jnp.asarray(np.linalg.cholesky(precision))))
    chol = np.linalg.cholesky(gram)
    prior = bank.PriorFactors(jnp.asarray(chol), jnp.asarray(np.linalg.inv(chol)))
    q = bank.gaussians(prior, factor, jnp.asarray(scale))
    for g in range(2):
        post = np.linalg.inv(gram[g]) + scale[g] * precision[g]
        h = scale[g] * shift[g]
        np.testing.assert_allclose(q.mean[g], np.linalg.solve(post, h), rtol=1e-10)
        np.testing.assert_allclose(q.sqrt_cov[g] @ q.sqrt_cov[g].T, np.linalg.inv(post), rtol=1e-10, atol=1e-12)
        expected = 0.5 * h @ np.linalg.solve(post, h) - 0.5 * np.linalg.slogdet(post)[1] - 0.5 * np.linalg.slogdet(gram[g])[1]
        assert float(q.log_normaliser[g]) == pytest.approx(expected, rel=1e-10)
    # two scales from one whitened precision LᵀΛL per GP (a cavity and q) are those computed one at a time
    cavity, full = bank.gaussians_at(prior, factor, (jnp.asarray(scale), 1.0))
    for together, alone in ((cavity, q), (full, bank.gaussians(prior, factor, 1.0))):
        for a, b in zip(together, alone):
            np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-15)


@pytest.mark.heavy
def test_bank_latent_covariance_is_the_sparse_gp_predictive():
    """``latent_moments(full_cov=True)`` against ``K_xz K⁻¹m`` and ``K_xx + dI − K_xz K⁻¹K_zx +
    K_xz K⁻¹VK⁻¹K_zx`` in numpy for a bank of two GPs (Titsias 2009, eq. 6); its diagonal is the marginal
    variance of ``latent_marginals``."""
    rng = np.random.default_rng(1)
    lengthscales, variance, diagonal = rng.uniform(0.5, 2.0, (2, 3)), np.array([1.0, 2.5]), np.array([1e-3, 0.1])
    z, x = rng.normal(size=(2, 5, 3)), rng.normal(size=(6, 3))
    gp = bank.Bank(oracles.se_bank(lengthscales, variance), jnp.asarray(z),
                   jnp.asarray(diagonal))
    roots = rng.normal(size=(2, 5, 5))
    factor = bank.NaturalFactor(jnp.asarray(rng.normal(size=(2, 5))), jnp.asarray(roots @ np.swapaxes(roots, 1, 2)))
    prior = bank.prior_factors(gp)
    q = bank.gaussians(prior, factor, 1.0)
    moments = jax.jit(bank.latent_moments, static_argnames="full_cov")  # one program, not ~50 dispatches
    mean, cov = moments(gp, prior, q, jnp.asarray(x), full_cov=True)
    assert mean.shape == (6, 2) and cov.shape == (2, 6, 6)
    for g in range(2):
        kernel = lambda a, b: oracles.se_kernel(a, b, lengthscales[g], variance[g])
        gram = kernel(z[g], z[g]) + diagonal[g] * np.eye(5)
        directions = np.linalg.solve(gram, kernel(z[g], x))  # K⁻¹K_zx
        v = np.asarray(q.sqrt_cov[g] @ q.sqrt_cov[g].T)
        expected = (kernel(x, x) + diagonal[g] * np.eye(6) - kernel(x, z[g]) @ directions
                    + directions.T @ v @ directions)
        np.testing.assert_allclose(mean[:, g], directions.T @ np.asarray(q.mean[g]), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(cov[g], expected, rtol=1e-10, atol=1e-12)
    marginals = moments(gp, prior, q, jnp.asarray(x))
    np.testing.assert_allclose(marginals.var, np.einsum("gbb->bg", cov), rtol=1e-10)
    np.testing.assert_allclose(marginals.mean, mean, rtol=1e-12, atol=1e-14)


def test_log_density_and_logdet():
    rng = np.random.default_rng(2)
    cov, x, mean = _random_spd(rng, 5), rng.normal(size=5), rng.normal(size=5)
    assert float(gaussian.log_density(jnp.asarray(x), jnp.asarray(mean), jnp.asarray(cov))) == pytest.approx(
        multivariate_normal(mean, cov).logpdf(x), rel=1e-12
    )
    assert float(logdet_from_cholesky(cholesky(jnp.asarray(cov)))) == pytest.approx(np.linalg.slogdet(cov)[1], rel=1e-12)


def test_the_normal_cdf_is_scipy_s_to_a_relative_1e_12_into_its_left_tail():
    """``gaussian.normal_cdf`` (one ``erfc``) against scipy's ``ndtr`` from ``x = −37`` (``Φ ≈ 6e-300``) to 9,
    relative to its value; its derivative is the normal density, also relative."""
    x = np.linspace(-37.0, 9.0, 20_001)
    value = np.asarray(jax.jit(gaussian.normal_cdf)(jnp.asarray(x)))
    np.testing.assert_allclose(value, scipy.special.ndtr(x), rtol=1e-12, atol=0)
    slope = np.asarray(jax.jit(jax.vmap(jax.grad(gaussian.normal_cdf)))(jnp.asarray(x)))
    np.testing.assert_allclose(slope, scipy.stats.norm.pdf(x), rtol=1e-12, atol=0)


def test_cholesky_jitter_is_added_to_the_diagonal():
    lower = cholesky(jnp.zeros((3, 3)), jitter=4.0)
    np.testing.assert_allclose(lower, 2.0 * np.eye(3))


def _difference_form(ls, amp, z, x):
    """``gram``/``cross`` from ``(z_m − x_b)`` directly: free of the expansion's cancellation, but
    ``[C, M, B, D]`` memory (an autodiff oracle for small sizes)."""
    def one(a, b):
        return amp[:, None, None] * jnp.exp(-0.5 * jnp.sum(((a[:, :, None] - b[:, None]) / ls[:, None, None]) ** 2, -1))
    return one(z, z), one(z, jnp.broadcast_to(x, (z.shape[0],) + x.shape))


@pytest.mark.heavy
@pytest.mark.parametrize("offset", [1e6, 1e8])
def test_kernels_have_no_cancellation_far_from_the_origin(offset):
    """Inputs sharing an offset of 1e6 or 1e8: values equal the exact-difference oracle (the differences
    of stored doubles this close are exact, Sterbenz) to 1e-12 — the uncentred expansion erred by
    2.6e-4 at 1e6 — and gradients equal autodiff of the difference form."""
    rng = np.random.default_rng(5)
    ls, amp = rng.uniform(0.5, 2.0, (3, 4)), rng.uniform(0.5, 2.0, 3)
    z, x = offset + rng.normal(size=(3, 5, 4)), offset + rng.normal(size=(6, 4))
    with jax.enable_x64(True):
        kernels = oracles.se_bank(ls, amp)
        gram, cross = kernels.gram(jnp.asarray(z)), kernels.cross(jnp.asarray(z), jnp.asarray(x))
        weights = jnp.asarray(rng.normal(size=(3, 5, 5))), jnp.asarray(rng.normal(size=(3, 5, 6)))

        def total(form):
            def fn(ls, amp, z, x):
                g, c = form(ls, amp, z, x)
                return jnp.sum(weights[0] * g) + jnp.sum(weights[1] * c)
            return jax.jit(jax.grad(fn, argnums=(0, 1, 2, 3)))(*(jnp.asarray(a) for a in (ls, amp, z, x)))

        grads = total(lambda ls, amp, z, x: (oracles.se_bank(ls, amp).gram(z), oracles.se_bank(ls, amp).cross(z, x)))
        expected_grads = total(_difference_form)
    for c in range(3):
        np.testing.assert_allclose(gram[c], oracles.se_kernel(z[c], z[c], ls[c], amp[c]), rtol=0, atol=1e-12)
        np.testing.assert_allclose(cross[c], oracles.se_kernel(z[c], x, ls[c], amp[c]), rtol=0, atol=1e-12)
    for a, b in zip(grads, expected_grads):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-11)


def test_centred_kernel_gradients_match_finite_differences():
    """The centre carries no gradient (stop_gradient); the gradient is still the exact one."""
    rng = np.random.default_rng(6)
    shapes = [(2, 3), (2,), (2, 4, 3)]
    x = jnp.asarray(rng.normal(size=(5, 3)))
    weights = jnp.asarray(rng.normal(size=(2, 4, 4))), jnp.asarray(rng.normal(size=(2, 4, 5)))

    def fn(theta):
        sizes = np.cumsum([int(np.prod(s)) for s in shapes])[:-1]
        ls, amp, z = (p.reshape(s) for p, s in zip(jnp.split(theta, sizes), shapes))
        kernels = oracles.se_bank(ls, amp)
        return jnp.sum(weights[0] * kernels.gram(z)) + jnp.sum(weights[1] * kernels.cross(z, x))

    with jax.enable_x64(True):
        theta = jnp.concatenate([jnp.asarray(rng.uniform(0.5, 2.0, 6)), jnp.asarray(rng.uniform(0.5, 2.0, 2)),
                                 jnp.asarray(rng.normal(size=24))])
        oracles.assert_gradient_matches_central_differences(fn, jax.grad(fn), theta, eps=1e-5, rtol=1e-7)


def test_log_bijection_round_trips():
    value = jnp.asarray([1e-3, 1.0, 250.0])
    np.testing.assert_allclose(positive_from_log(log_of_positive(value)), value, rtol=1e-6)


def test_the_inverse_bijections_map_host_values_on_the_host_and_traced_ones_in_the_trace():
    """A start or a user's setting is mapped by numpy in float64 (no program compiled; jnp's log of it had been
    float32 outside pep's float64 scope), a traced value by jax.numpy, to the same numbers."""
    values = np.array([1e-3, 0.3, 250.0])
    for inverse in (log_of_positive, unconstrain_positive):
        on_host = inverse(values)
        assert isinstance(on_host, np.ndarray) and on_host.dtype == np.float64
        with jax.enable_x64(True):
            np.testing.assert_allclose(jax.jit(inverse)(jnp.asarray(values)), on_host, rtol=1e-15)


def test_a_kernel_made_outside_the_float64_scope_keeps_its_values_to_double_precision():
    with jax.enable_x64(False):  # as a user makes one (the tests run in float64)
        kernel = SquaredExponential(lengthscales=0.3, variance=2.7)
    with jax.enable_x64(True):
        banked = kernel.bank(1, 2)
        assert banked.lengthscales.value.dtype == jnp.float64
        np.testing.assert_allclose(banked.lengthscales.value, 0.3, rtol=1e-15)
        np.testing.assert_allclose(banked.variance.value, 2.7, rtol=1e-15)


@settings(max_examples=50, deadline=None)
@given(st.floats(min_value=1e-6, max_value=1e6))
def test_positive_bijection_round_trips(value):
    with jax.enable_x64(True):
        assert float(positive(unconstrain_positive(value))) == pytest.approx(value, rel=1e-9)


@pytest.mark.heavy
def test_cholesky_and_inverse_gradient_matches_autodiff_and_finite_differences():
    """The matrix-product backward pass of cholesky_and_inverse equals autodiff through a Cholesky and
    a triangular solve (symmetrised), and central differences along a symmetric direction."""
    from pep_gp.core.linalg import cholesky_and_inverse, per_matrix, solve_lower

    rng = np.random.default_rng(4)
    with jax.enable_x64(True):
        a = rng.normal(size=(3, 6, 6))
        matrices = jnp.asarray(a @ np.swapaxes(a, 1, 2) + 6 * np.eye(6))
        w_chol, w_inv = jnp.asarray(rng.normal(size=(3, 6, 6))), jnp.asarray(rng.normal(size=(3, 6, 6)))

        def loss(factors):
            lower, inverse = factors
            return jnp.sum(w_chol * lower) + jnp.sum(w_inv * inverse) + jnp.sum(jnp.log(jnp.diagonal(lower, 0, 1, 2)))

        def plain(m):
            lower = per_matrix(cholesky, m)
            return loss((lower, per_matrix(lambda l: solve_lower(l, jnp.eye(6)), lower)))

        grad = jax.grad(lambda m: loss(cholesky_and_inverse(m)))(matrices)
        expected = jax.grad(plain)(matrices)
        np.testing.assert_allclose(grad, 0.5 * (expected + jnp.swapaxes(expected, 1, 2)), atol=1e-13)
        direction = jnp.asarray(rng.normal(size=(3, 6, 6)))
        direction = direction + jnp.swapaxes(direction, 1, 2)
        step = 1e-6
        central = (plain(matrices + step * direction) - plain(matrices - step * direction)) / (2 * step)
        assert float(jnp.sum(grad * direction)) == pytest.approx(float(central), rel=1e-7)
        lower, inverse = cholesky_and_inverse(matrices)
        np.testing.assert_allclose(lower @ inverse, np.broadcast_to(np.eye(6), (3, 6, 6)), atol=1e-13)

        # L held (its cotangent a symbolic zero, as in SEP's step: the backward skips LᵀL̄), log|A| from P
        def through_inverse(inverse):
            return jnp.sum(w_inv * inverse) - 2.0 * jnp.sum(jnp.log(jnp.diagonal(inverse, 0, 1, 2)))

        def held(m):
            lower, inverse = cholesky_and_inverse(m)
            return through_inverse(inverse) + jnp.sum(jax.lax.stop_gradient(lower))

        grad = jax.grad(held)(matrices)
        expected = jax.grad(lambda m: through_inverse(per_matrix(lambda l: solve_lower(l, jnp.eye(6)),
                                                                  per_matrix(cholesky, m))))(matrices)
        np.testing.assert_allclose(grad, 0.5 * (expected + jnp.swapaxes(expected, 1, 2)), atol=1e-13)


@pytest.mark.parametrize("cls", [MultiClassParams, RegressionParams])
def test_every_parameter_table_round_trips(cls):
    """Each parameter pytree declares its bijections once; constrained ∘ unconstrained is the identity."""
    values = {name: jnp.asarray([0.3, 2.0, 40.0]) for name, _ in cls.BIJECTIONS.values()}
    raw = unconstrained(cls, **values)
    params = cls(**raw, **{field: None for field in cls._fields if field not in raw})
    for name, value in constrained(params).items():
        np.testing.assert_allclose(value, values[name], rtol=1e-12)


@pytest.mark.heavy
def test_float32_kernel_products_stay_within_their_stated_error():
    """``products="float32"`` (images: D = 784, pixels in [0, 1], ℓ² the median distance as the
    multi-class model starts): the squared distances differ from the float64 kernel's by less than
    ``4·eps₃₂·(‖z − c‖² + ‖x − c‖²)/ℓ²`` (the docstring's ~6e-8 per unit, with margin), so the kernel
    values by less than 1e-5 relative; gradients agree to 1e-4 relative; float64 products are the
    default and bit-equal to the kernel without the field; another dtype is refused, naming it."""
    rng = np.random.default_rng(11)
    dim = 784
    z, x = rng.uniform(size=(3, 20, dim)) ** 3, rng.uniform(size=(30, dim)) ** 3  # sparse-ish, like images
    weights = rng.normal(size=(3, 20, 20)), rng.normal(size=(3, 20, 30))

    @jax.jit  # one program (op by op, each of the many small operations compiled on its own)
    def compare(z, x, weights):
        ls = jnp.full((3, dim), jnp.sqrt(jnp.median(jnp.sum((x[:15] - x[15:]) ** 2, axis=1))))
        amp = jnp.asarray([0.5, 1.0, 2.0])
        exact, fast = (oracles.se_bank(ls, amp).with_products(products) for products in ("float64", "float32"))
        centre = jnp.mean(z.reshape(-1, dim), axis=0)
        norms_z = jnp.sum(((z - centre) / ls[:, None]) ** 2, -1)
        norms_x = jnp.sum(((x - centre) / ls[0]) ** 2, -1)
        bound = 4 * jnp.finfo(jnp.float32).eps * (norms_z[:, :, None] + norms_x[None, None, :])
        sq = lambda k: -2.0 * jnp.log(k.cross(z, x) / amp[:, None, None])

        def gradient(products):
            def fn(ls, amp, z):
                k = oracles.se_bank(ls, amp).with_products(products)
                return jnp.sum(weights[0] * k.gram(z)) + jnp.sum(weights[1] * k.cross(z, x))
            return jax.grad(fn, argnums=(0, 1, 2))(ls, amp, z)

        return {"gap": jnp.abs(sq(fast) - sq(exact)), "bound": bound, "cross": (fast.cross(z, x), exact.cross(z, x)),
                "gram": (fast.gram(z), exact.gram(z)), "default_gram": oracles.se_bank(ls, amp).gram(z),
                "gradients": (gradient("float32"), gradient("float64"))}

    with jax.enable_x64(True):
        out = jax.device_get(compare(jnp.asarray(z), jnp.asarray(x), tuple(map(jnp.asarray, weights))))
    assert np.all(out["gap"] <= out["bound"])
    np.testing.assert_allclose(*out["cross"], rtol=1e-5)
    np.testing.assert_allclose(*out["gram"], rtol=1e-5)
    np.testing.assert_array_equal(out["default_gram"], out["gram"][1])
    for a, b in zip(*out["gradients"]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * float(np.max(np.abs(b))))
    with pytest.raises(ValueError, match="products.*'float16'"):
        SquaredExponential(products="float16")
