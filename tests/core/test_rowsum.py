"""``row_chunked_sum``: value and gradient of a sum over rows computed chunk by chunk equal those of the
whole sum (rows not a multiple of the chunk: the padded rows must add nothing)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pep_gp.core.rowsum import row_chunked_sum


def _term(params, x, y, mask):
    weights, scale = params
    prediction = jnp.tanh(x @ weights) * scale["value"]
    return jnp.sum(jnp.where(mask, jnp.log1p((prediction - y) ** 2), 0.0))


@pytest.mark.heavy
@pytest.mark.parametrize("chunk", [1, 3, 7, 64])
def test_chunked_sum_and_gradient_equal_the_whole_sum(chunk):
    rng = np.random.default_rng(0)
    x, y = jnp.asarray(rng.normal(size=(17, 4))), jnp.asarray(rng.normal(size=17))
    mask = jnp.asarray(rng.uniform(size=17) > 0.2)
    params = (jnp.asarray(rng.normal(size=4)), {"value": jnp.asarray(1.3)})
    chunked = jax.jit(jax.value_and_grad(row_chunked_sum(_term, chunk)))(params, x, y, mask)
    whole = jax.jit(jax.value_and_grad(_term))(params, x, y, mask)
    assert float(chunked[0]) == pytest.approx(float(whole[0]), rel=1e-13)
    for a, b in zip(jax.tree_util.tree_leaves(chunked[1]), jax.tree_util.tree_leaves(whole[1])):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    value = float(jax.jit(row_chunked_sum(_term, chunk))(params, x, y, mask))
    assert value == pytest.approx(float(whole[0]), rel=1e-13)


def test_the_cotangent_scales_the_gradient():
    x, y = jnp.ones((5, 4)), jnp.arange(5.0)
    params = (jnp.full(4, 0.1), {"value": jnp.asarray(2.0)})
    total = row_chunked_sum(_term, 2)
    doubled = jax.grad(lambda p: -3.0 * total(p, x, y, jnp.ones(5, bool)))(params)
    single = jax.grad(lambda p: total(p, x, y, jnp.ones(5, bool)))(params)
    for a, b in zip(jax.tree_util.tree_leaves(doubled), jax.tree_util.tree_leaves(single)):
        np.testing.assert_allclose(a, -3.0 * b, rtol=1e-14)
