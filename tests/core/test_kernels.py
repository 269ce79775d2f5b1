"""Every kernel of pep_gp.core.kernels against an independent implementation: scikit-learn's
``sklearn.gaussian_process.kernels`` where it has the kernel, else a plain numpy formula; sums, products and
``active_dims``; gradients against central differences; positive semi-definite Gram matrices (hypothesis)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from jax.flatten_util import ravel_pytree
from sklearn.gaussian_process import kernels as sk

from pep_gp.core import kernels as k
from pep_gp.core.parameters import Positive, fixed_leaves
from tests import oracles

RNG = np.random.default_rng(38)
Z = RNG.normal(size=(2, 5, 3))  # G = 2 GPs, M = 5 inducing inputs, D = 3
X = RNG.normal(size=(4, 3))
LS = np.array([[0.7, 1.3, 2.1], [1.6, 0.5, 0.9]])  # per GP and column
VAR = np.array([1.7, 0.6])


def _numpy_periodic(a, b, ls, var, period):
    diff = a[:, None, :] - b[None, :, :]
    return var * np.exp(-2.0 * np.sum(np.sin(np.pi * diff / period) ** 2 / ls**2, axis=-1))


def _sklearn(name, g, ls=None):
    """The scikit-learn kernel of GP ``g`` (``ls``: its lengthscales) for a pep kernel ``name``."""
    ls = LS[g] if ls is None else ls
    scale = sk.ConstantKernel(VAR[g], "fixed")
    if name == "rq":
        return scale * sk.RationalQuadratic(float(ls), alpha=0.8)
    return {"se": scale * sk.RBF(ls), "matern12": scale * sk.Matern(ls, nu=0.5),
            "matern32": scale * sk.Matern(ls, nu=1.5), "matern52": scale * sk.Matern(ls, nu=2.5),
            "linear": scale * sk.DotProduct(sigma_0=0.0), "constant": scale}[name]


def _pep(name):
    return {"se": k.SquaredExponential(LS, VAR), "matern12": k.Matern12(LS, VAR), "matern32": k.Matern32(LS, VAR),
            "matern52": k.Matern52(LS, VAR), "rq": k.RationalQuadratic(LS[:, :1], VAR, alpha=0.8),
            "linear": k.Linear(VAR), "constant": k.Constant(VAR)}[name]


def _all_three(kernel, z=Z, x=X):
    with jax.enable_x64(True):
        kernel = kernel.bank(2, z.shape[-1])
        out = jax.jit(lambda kern: (kern.gram(jnp.asarray(z)), kern.cross(jnp.asarray(z), jnp.asarray(x)),
                                    kern.diag(jnp.asarray(x))))(kernel)
    return [np.asarray(a) for a in out]


def _check(kernel, reference, z=Z, x=X):
    """``gram``, ``cross`` and ``diag`` of ``kernel`` equal ``reference(g, a, b)`` per GP to 1e-12."""
    gram, cross, diag = _all_three(kernel, z, x)
    for g in range(2):
        np.testing.assert_allclose(gram[g], reference(g, z[g], z[g]), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(cross[g], reference(g, z[g], x), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(diag[g], np.diag(reference(g, x, x)), rtol=1e-12, atol=1e-12)


@pytest.mark.heavy
@pytest.mark.parametrize("name", ["se", "matern12", "matern32", "matern52", "rq", "linear", "constant"])
def test_each_kernel_equals_scikit_learns(name):
    ls = lambda g: LS[g, 0] if name == "rq" else LS[g]
    _check(_pep(name), lambda g, a, b: _sklearn(name, g, ls(g))(a, b))


def test_periodic_equals_scikit_learns_exp_sine_squared_in_one_dimension_and_numpy_in_three():
    z1, x1 = Z[..., :1], X[:, :1]
    one = k.Periodic(LS[:, :1], VAR, period=[[1.3], [0.7]])
    _check(one, lambda g, a, b: VAR[g] * sk.ExpSineSquared(LS[g, 0], [1.3, 0.7][g])(a, b), z1, x1)
    period = np.array([[1.3, 2.0, 0.9], [0.7, 1.1, 3.0]])
    _check(k.Periodic(LS, VAR, period), lambda g, a, b: _numpy_periodic(a, b, LS[g], VAR[g], period[g]))


def test_shared_lengthscale_is_the_ard_kernel_with_equal_values():
    shared = k.Matern32([[0.9], [1.4]], VAR)
    _check(shared, lambda g, a, b: VAR[g] * sk.Matern(length_scale=[0.9, 1.4][g], nu=1.5)(a, b))


def test_sums_products_and_active_dims_equal_scikit_learns_composition():
    """``(Matérn 5/2 on columns 0, 2) + Linear·SE`` against the same scikit-learn composition (its kernels see the
    selected columns), and a positive number as a constant factor."""
    kernel = k.Matern52(LS[:, [0, 2]], VAR, active_dims=[0, 2]) + k.Linear(0.3) * k.SquaredExponential(LS, 1.0)

    def reference(g, a, b):
        matern = _sklearn("matern52", g, LS[g, [0, 2]])(a[:, [0, 2]], b[:, [0, 2]])
        return matern + 0.3 * sk.DotProduct(0.0)(a, b) * sk.RBF(LS[g])(a, b)

    _check(kernel, reference)
    _check(2.0 * k.SquaredExponential(LS, VAR), lambda g, a, b: 2.0 * _sklearn("se", g)(a, b))


@pytest.mark.heavy
@pytest.mark.parametrize("kernel", [
    k.SquaredExponential(LS, VAR), k.Matern12(LS, VAR), k.Matern32(LS, VAR), k.Matern52(LS, VAR),
    k.RationalQuadratic(LS, VAR, 0.8), k.Periodic(LS, VAR, 1.5), k.Linear(VAR) + k.Constant(0.5),
    k.Matern52(LS[:, :2], VAR, active_dims=[0, 1]) * k.Periodic(LS[:, 2:], 1.0, 2.0, active_dims=[2]),
], ids=lambda kernel: repr(kernel)[:30])
def test_gradients_match_central_differences(kernel):
    """``Σ W∘gram + Σ V∘cross + Σ U∘diag`` in the stored (log) hyper-parameters and the inducing inputs."""
    weights = [jnp.asarray(RNG.normal(size=shape)) for shape in ((2, 5, 5), (2, 5, 4), (2, 4))]
    with jax.enable_x64(True):
        kernel = kernel.bank(2, 3)
        flat, unravel = ravel_pytree((kernel, jnp.asarray(Z)))

        def fn(theta):
            kern, z = unravel(theta)
            return (jnp.sum(weights[0] * kern.gram(z)) + jnp.sum(weights[1] * kern.cross(z, jnp.asarray(X)))
                    + jnp.sum(weights[2] * kern.diag(jnp.asarray(X))))

        oracles.assert_gradient_matches_central_differences(fn, jax.grad(fn), flat, eps=1e-6, rtol=1e-6)


@pytest.mark.heavy
def test_gram_diagonal_has_a_finite_gradient_for_matern12():
    """``r = 0`` on a Gram matrix's diagonal (and at repeated inducing inputs) gives zero, not NaN, gradients."""
    with jax.enable_x64(True):
        kernel = k.Matern12(LS, VAR).bank(2, 3)
        z = jnp.asarray(np.concatenate([Z[:, :2], Z[:, :2]], axis=1))
        grads = jax.grad(lambda kern, z: jnp.sum(kern.gram(z)), argnums=(0, 1))(kernel, z)
    assert all(np.all(np.isfinite(leaf)) for leaf in jax.tree_util.tree_leaves(grads))


@pytest.mark.heavy
@settings(max_examples=25, deadline=None)
@given(st.sampled_from(["se", "matern12", "matern32", "matern52", "rq", "periodic", "linear+se", "se*periodic"]),
       st.integers(0, 2**31 - 1), st.floats(0.05, 20.0))
def test_gram_matrices_are_positive_semi_definite(name, seed, lengthscale):
    """Eigenvalues of every Gram matrix at random (clustered) inputs are ≥ −1e-10 of its trace."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(1, 12, 2)) * rng.uniform(0.01, 5.0) + rng.integers(0, 2, size=(1, 12, 1))
    kernel = k.parse(name)
    values = {"lengthscales": lengthscale}
    kernel = k.from_dict(_with_values(kernel.to_dict(), values)).bank(1, 2)
    with jax.enable_x64(True):
        gram = np.asarray(kernel.gram(jnp.asarray(z)))[0]
    assert np.min(np.linalg.eigvalsh(gram)) >= -1e-10 * np.trace(gram)


def _with_values(description, values):
    if "terms" in description:
        return {**description, "terms": [_with_values(t, values) for t in description["terms"]]}
    return {**description, **{f: v for f, v in values.items() if f in k.KERNELS[description["name"]].parameters}}


def test_descriptions_and_spellings_round_trip_and_name_mistakes():
    kernel = k.Matern52(0.5, 2.0, fixed=("lengthscales",)) + k.Linear(active_dims=[1]) * k.Periodic(1.0, period=3.0)
    assert k.from_dict(kernel.to_dict()) == kernel
    assert k.parse("matern52 + linear*periodic").to_dict()["terms"][1]["name"] == "product"
    assert repr(kernel) == ("Matern52(lengthscales=0.5 (fixed), variance=2) + Linear(variance=1, active_dims=[1]) * "
                            "Periodic(lengthscales=1, variance=1, period=3)")
    with pytest.raises(ValueError, match=r"unknown kernel 'matern25'.*did you mean 'matern52'"):
        k.parse("matern25")
    with pytest.raises(ValueError, match=r"kernel 'se': unknown fields \['period'\]"):
        k.from_dict({"name": "se", "period": 2.0})
    with pytest.raises(ValueError, match="lengthscales must be positive and finite; got -1"):
        k.Matern32(lengthscales=-1)
    with pytest.raises(ValueError, match=r"fixed names \['lengthscale'\]"):
        k.SquaredExponential(fixed=("lengthscale",))
    with pytest.raises(ValueError, match=r"active_dims \[3\] must lie in 0..2"):
        k.Linear(active_dims=[3]).bank(1, 3)
    with pytest.raises(ValueError, match="lengthscales needs 1 or 3 values"):
        k.SquaredExponential([1.0, 2.0]).bank(1, 3)


def test_fixed_values_are_marked_for_the_optimiser():
    kernel = (k.Matern52(0.5, fixed="lengthscales") + k.Linear()).bank(1, 2)
    marks = fixed_leaves(kernel)
    assert marks.left.lengthscales.raw is True and marks.left.variance.raw is False
    assert marks.right.variance.raw is False
    assert isinstance(kernel.left.lengthscales, Positive) and kernel.left.lengthscales.fixed
