"""Mean functions (issue 65, item 2): pytrees that round-trip under ``jit``, their reading in the data's units
against direct evaluation, and the collapsed evidence with a mean at Z = X against the exact GP's log marginal
likelihood of ``y − m(X)`` (a dense numpy reference, Rasmussen & Williams 2006, eq. 2.30)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pep_gp.core import means
from pep_gp.core.models.collapsed_regression import CollapsedRegression, RegressionParams
from pep_gp.core.models.power_ep import PowerEPSparseGP
from pep_gp.core.likelihoods import Gaussian
from pep_gp.core.parameters import unconstrained
from tests import oracles

LS, VAR, NOISE = np.array([0.8, 1.3]), 1.4, 0.09


@pytest.fixture
def data():
    rng = np.random.default_rng(3)
    x = rng.uniform(-2, 2, size=(40, 2))
    y = np.sin(2 * x[:, 0]) + 1.5 * x[:, 1] + 2.0 + 0.3 * rng.normal(size=40)
    return x, y


@means.register_mean("test-quadratic")
class Quadratic(means.MeanFunction):
    """``a·x₀² + c``: a user's own mean, as the docs show it."""

    parameters = ("a", "c")

    def __call__(self, x):
        return self.a * x[:, 0] ** 2 + self.c


MEANS = [means.Zero(), means.Constant(0.7), means.Linear(weights=[0.5, -1.0], bias=0.3), Quadratic(a=0.4, c=-0.2)]


@pytest.mark.parametrize("mean", MEANS, ids=lambda m: m.name)
def test_every_mean_round_trips_through_its_pytree_under_jit_and_its_description(mean, data):
    x = jnp.asarray(data[0])
    built = mean.build(2)
    leaves, tree = jax.tree_util.tree_flatten(built)
    again = jax.jit(lambda leaves: jax.tree_util.tree_unflatten(tree, leaves)(x))(leaves)
    np.testing.assert_allclose(again, built(x), rtol=1e-14, atol=1e-15)  # XLA may fuse the compiled one
    assert means.from_dict(built.to_dict()) == built
    assert len(leaves) == len(type(mean).parameters)


@pytest.mark.parametrize("mean", MEANS, ids=lambda m: m.name)
def test_in_data_units_is_the_mean_of_the_standardised_inputs_in_target_units(mean, data):
    """``shift + scale·m((x − x_mean)/x_std)`` evaluated directly, against the closed forms (Constant, Linear)
    and the generic wrapper (a user's mean)."""
    x = data[0] * 3.0 + 10.0
    x_mean, x_std, shift, scale = x.mean(0), x.std(0), 4.0, 2.5
    built = mean.build(2)
    direct = shift + scale * np.asarray(built(jnp.asarray((x - x_mean) / x_std)))
    np.testing.assert_allclose(built.in_data_units(x_mean, x_std, shift, scale)(jnp.asarray(x)), direct, rtol=1e-12,
                               atol=1e-12)


def test_zero_adds_exactly_nothing(data):
    x, y = map(jnp.asarray, data)
    assert means.Zero().plus(x, y) is y and means.Zero().minus(x, y) is y


@pytest.mark.heavy
@pytest.mark.parametrize("alpha", [1.0, 0.5, 0.0])
@pytest.mark.parametrize("mean", MEANS[1:], ids=lambda m: m.name)
def test_collapsed_evidence_with_a_mean_at_z_equal_x_is_the_exact_gp_evidence_of_y_less_the_mean(data, mean, alpha):
    """At Z = X and zero jitter every α gives ``log N(y − m(X); 0, K + σ²I)`` (measured ~1e-14 relative)."""
    x, y = data
    built = mean.build(2)
    noise = unconstrained(RegressionParams, noise_variance=jnp.asarray(NOISE))
    params = RegressionParams(oracles.se_bank(LS, VAR), **noise, inducing=jnp.asarray(x), mean=built)
    model = CollapsedRegression(alpha=alpha, jitter=0.0)
    evidence = model.data_energy(params, (), jnp.asarray(x), jnp.asarray(y), jnp.ones(len(y), bool))
    exact = oracles.exact_gp_evidence(x, y - np.asarray(built(jnp.asarray(x))), LS, VAR, NOISE)
    assert float(evidence) == pytest.approx(exact, rel=1e-8)
    mean_f, _ = model.predict_f(params, jnp.asarray(x), jnp.asarray(y), jnp.asarray(x[:5] + 0.1))
    zero_f, _ = model.predict_f(params._replace(mean=means.Zero()), jnp.asarray(x),
                                jnp.asarray(y - built(jnp.asarray(x))), jnp.asarray(x[:5] + 0.1))
    np.testing.assert_allclose(mean_f, zero_f + built(jnp.asarray(x[:5] + 0.1)), rtol=1e-12, atol=1e-12)


@pytest.mark.heavy
def test_the_power_ep_energy_with_a_mean_is_the_zero_mean_energy_of_the_shifted_targets(data):
    """The Gaussian likelihood sees ``f = m(x) + g(x)``: its energy with a mean equals that of ``y − m(x)``
    without one, and the predictive mean is shifted by ``m(x*)`` with the variance unchanged."""
    x, y = map(jnp.asarray, data)
    model = PowerEPSparseGP(Gaussian(), alpha=0.5)
    params = model.init(x, 6, likelihood_params=Gaussian.init_params(0.1))
    mean = means.Linear(weights=[0.5, -1.0], bias=0.3).build(2)
    with_mean = params._replace(mean=mean)
    assert float(model.energy(with_mean, x, y)) == pytest.approx(float(model.energy(params, x, y - mean(x))), rel=1e-12)
    shifted, var = model.predict_f(with_mean, x[:4])
    plain, plain_var = model.predict_f(params, x[:4])
    np.testing.assert_allclose(shifted, plain + mean(x[:4]), rtol=1e-12)
    np.testing.assert_array_equal(var, plain_var)
