"""A layer of sparse GPs seen through a diagonal Gaussian input, for any kernel: the ψ-statistics by quadrature.

Bui et al. (2016, App. D eqs. 1–7) need, per row, the moments of a GP's output ``f(h)`` when its input is
``h ~ N(μ, diag(s))``: ``mean = ψ₁ᵀa`` and ``var = ψ₀ − tr(K⁻¹ψ₂) + tr(K⁻¹V̂K⁻¹ψ₂) + aᵀψ₂a − mean²`` with
``ψ₀ = E[k(h, h)]``, ``ψ₁ = E[k(Z, h)]`` and ``ψ₂ = E[k(Z, h)k(h, Z)]``. These have a closed form for the
squared exponential (:mod:`pep_gp.core.psi_statistics`); for the other kernels of :mod:`pep_gp.core.kernels`
(Matérn, rational quadratic, periodic, sums and products, ``active_dims``) they do not, and this module takes
every expectation with one rule of ``Q`` weighted nodes ``ξ_q`` for the standard normal (:class:`InputRule`),
``h_q = μ + √s ⊙ ξ_q``:

    ψ₀ ≈ Σ_q w_q k(h_q, h_q),   ψ₁ ≈ Σ_q w_q k(Z, h_q),   ψ₂ ≈ Σ_q w_q k(Z, h_q) k(h_q, Z).

These are never formed. The output's moments are linear in them, so they are the same weighted sums of the
moments at the fixed rows ``h_q`` (the law of total variance over the nodes):

    mean = Σ_q w_q m(h_q),   var = Σ_q w_q v(h_q) + Σ_q w_q (m(h_q) − mean)²,

with ``m(h)``, ``v(h)`` the output's mean and variance at a fixed row (its FITC variance plus the spread of
``u``, :func:`pep_gp.core.psi_statistics.fixed_input_marginals`): one product of ``[L⁻¹; P]`` with the
``B·Q`` node rows. A sum of kernels needs no cross terms of its own (``ψ₂``'s ``E[k₁k₂]`` are in the products
at each node), and every part of the variance is non-negative at each node (the variance of the mean is a
weighted sum of squares, with no cancellation).

The rule (:func:`input_rule`) is the product Gauss–Hermite rule: exact for polynomials of degree ``2n − 1``
in each coordinate with ``n`` points per dimension. A kernel that is a polynomial of degree ``p`` in its input
(:meth:`~pep_gp.core.kernels.Kernel.polynomial_degree`: the linear kernel, constants, their sums and
products) makes ``m`` of degree ``p`` and ``v`` of degree ``2p``, so ``n = p + 1`` points give its closed form
(for the linear kernel ``E[h]ᵀz`` and ``zᵀ(μμᵀ + diag s)z'``) exactly, at ``2^D`` nodes. Other kernels get
``points`` per dimension while ``points^D`` is at most :data:`MAX_PRODUCT_NODES`, fewer per dimension above
that (at least 2), and above ``2^D > MAX_PRODUCT_NODES`` a fixed set of :data:`MAX_PRODUCT_NODES` scrambled
Sobol points mapped to the normal and mirrored (``±ξ``, so odd moments are exact), seeded: every rule is
deterministic. The Matérn kernels have a kink at ``h = z`` that no such rule resolves: the error falls only
algebraically with the points per dimension (slowest for Matérn ½, fastest for ⁵⁄₂) and grows with ``s/ℓ²``;
at ``s = ℓ²/4`` in two dimensions and 5 points, the largest error of ``ψ₁`` over 20 inducing inputs was
9e-3·σ² (Matérn ½), 3e-3·σ² (³⁄₂) and 9e-4·σ² (⁵⁄₂), against 4·10⁶-draw Monte Carlo (unit lengthscales).
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from numpy.polynomial.hermite_e import hermegauss
from scipy.stats import norm, qmc

from .bank import Bank, Marginals, PriorFactors
from .kernels import Kernel
from .psi_statistics import Projected, fixed_input_marginals

DEFAULT_POINTS = 5
"""Gauss–Hermite points per input dimension of a non-polynomial kernel (25 nodes at the default two hidden
dimensions)."""
MAX_PRODUCT_NODES = 256
"""The most nodes of a product rule; wider inputs get fewer points per dimension, then Sobol points."""
SOBOL_SEED = 0


class InputRule(NamedTuple):
    """``Q`` nodes and positive weights (summing to 1) for expectations under ``N(0, I_D)``."""

    nodes: np.ndarray  # [Q, D]
    weights: np.ndarray  # [Q]


def gauss_hermite_rule(dims: int, points: int) -> InputRule:
    """The product of ``dims`` ``points``-point Gauss–Hermite rules for ``N(0, 1)`` (probabilists' Hermite
    polynomials), ``points^dims`` nodes."""
    nodes, weights = hermegauss(points)
    grid = np.stack(np.meshgrid(*[nodes] * dims, indexing="ij"), axis=-1).reshape(-1, dims)
    product = np.prod(np.stack(np.meshgrid(*[weights] * dims, indexing="ij"), axis=-1).reshape(-1, dims), axis=-1)
    return InputRule(grid, product / np.sum(product))


def sobol_rule(dims: int, count: int) -> InputRule:
    """``count`` equally weighted nodes: ``count/2`` scrambled Sobol points (seed :data:`SOBOL_SEED`) mapped to
    ``N(0, I)`` and their mirror images."""
    half = norm.ppf(qmc.Sobol(dims, scramble=True, seed=SOBOL_SEED).random(count // 2))
    nodes = np.concatenate([half, -half])
    return InputRule(nodes, np.full(len(nodes), 1.0 / len(nodes)))


def input_rule(kernel: Kernel, dims: int, points: int = DEFAULT_POINTS) -> InputRule:
    """The rule a layer with ``kernel`` on ``dims`` Gaussian inputs uses (module docstring): exact for a
    polynomial kernel, else ``points`` Gauss–Hermite points per dimension within :data:`MAX_PRODUCT_NODES`."""
    if points < 2:
        raise ValueError(f"quadrature points per dimension must be at least 2; got {points}")
    degree = kernel.polynomial_degree()
    if degree is not None:
        return gauss_hermite_rule(dims, degree + 1)
    per_dimension = points
    while per_dimension > 2 and per_dimension**dims > MAX_PRODUCT_NODES:
        per_dimension -= 1
    if per_dimension**dims <= MAX_PRODUCT_NODES:
        return gauss_hermite_rule(dims, per_dimension)
    return sobol_rule(dims, MAX_PRODUCT_NODES)


def quadrature_input_marginals(bank: Bank, prior: PriorFactors, gaussian: Projected, rule: InputRule,
                               mean, var) -> Marginals:
    """Mean and variance ``[B, G]`` of every GP's output at a Gaussian input ``N(mean, diag(var))``
    (``[B, D]`` each), ``u`` distributed as ``gaussian``, by ``rule`` (module docstring). At ``var = 0`` this
    is :func:`~pep_gp.core.psi_statistics.fixed_input_marginals` at the rows ``mean``."""
    nodes = jnp.asarray(rule.nodes, dtype=mean.dtype)
    weights = jnp.asarray(rule.weights, dtype=mean.dtype)
    rows = mean[:, None, :] + jnp.sqrt(var)[:, None, :] * nodes[None]  # [B, Q, D]
    at_nodes = fixed_input_marginals(bank, prior, gaussian, rows.reshape(-1, rows.shape[-1]))
    shape = (*rows.shape[:2], -1)
    node_mean, node_var = at_nodes.mean.reshape(shape), at_nodes.var.reshape(shape)  # [B, Q, G]
    out_mean = jnp.einsum("bqg,q->bg", node_mean, weights)
    spread = jnp.einsum("bqg,q->bg", (node_mean - out_mean[:, None, :]) ** 2, weights)
    return Marginals(out_mean, jnp.einsum("bqg,q->bg", node_var, weights) + spread)
