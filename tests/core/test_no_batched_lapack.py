"""No energy, gradient or prediction may contain a *batched* LAPACK call.

jaxlib 0.10 on CPU runs a batched Cholesky / triangular solve by fanning the batch out to the XLA
thread pool and blocking on it, which deadlocks once as many such calls run concurrently as the pool
has threads (see ``pep_gp.core.linalg.per_matrix``). These tests walk the traced programs and fail on any
linear-algebra primitive whose operand is more than one matrix.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend.core import ClosedJaxpr, Jaxpr

from pep_gp.core.likelihoods import Gaussian, Probit
from pep_gp.core.models.multiclass import MultiClassGP
from pep_gp.core.models.power_ep import PowerEPSparseGP

LAPACK = {"cholesky", "triangular_solve", "lu", "qr", "eigh", "svd"}


def _batched_lapack(jaxpr) -> list[str]:
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in LAPACK and any(v.aval.ndim > 2 for v in eqn.invars):
            found.append(f"{eqn.primitive.name}{[v.aval.shape for v in eqn.invars]}")
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(sub, ClosedJaxpr):
                    found += _batched_lapack(sub.jaxpr)
                elif isinstance(sub, Jaxpr):
                    found += _batched_lapack(sub)
    return found


def _assert_unbatched(fn, *args):
    for program in (fn, jax.grad(fn)):
        assert _batched_lapack(jax.make_jaxpr(program)(*args).jaxpr) == []


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 2))
    return x, (x[:, 0] > 0).astype(float), np.digitize(x[:, 0], [-0.5, 0.5])


def test_the_walker_finds_a_vmapped_cholesky():
    eye = jnp.broadcast_to(jnp.eye(3), (4, 3, 3))
    assert _batched_lapack(jax.make_jaxpr(jax.vmap(jnp.linalg.cholesky))(eye).jaxpr)


@pytest.mark.heavy
@pytest.mark.parametrize("likelihood", [Gaussian(), Probit()])
def test_power_ep_energy(data, likelihood):
    x, labels, _ = data
    model = PowerEPSparseGP(likelihood, alpha=0.5)
    lik = Gaussian.init_params(0.1) if isinstance(likelihood, Gaussian) else None
    params = model.init(x, 5, likelihood_params=lik)
    _assert_unbatched(lambda p: model.energy(p, jnp.asarray(x), jnp.asarray(labels)), params)


@pytest.mark.heavy
@pytest.mark.parametrize("factor", ["natural", "cholesky"])
def test_multiclass_energy_and_prediction(data, factor):
    x, _, classes = data
    model = MultiClassGP(3)
    params = model.init(x, 4, noise=0.3, factor=factor)
    xj, yj = jnp.asarray(x), jnp.asarray(classes)
    _assert_unbatched(lambda p: model.energy(p, xj, yj), params)
    assert _batched_lapack(jax.make_jaxpr(lambda p: model.predict(p, xj))(params).jaxpr) == []
