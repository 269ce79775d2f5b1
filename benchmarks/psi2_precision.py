"""Which ψ₂ gradient is right (issue 28): pep's traces ``tr(Wψ₂)`` written about the inducing inputs' centre
over the pairs ``m ≤ m'`` (:func:`pep_gp.core.psi_statistics.psi2_traces`) and the previous implementation's
dense ψ₂ (every ``[B, M, M]`` entry formed from differences, then contracted) against a 30-digit mpmath
evaluation of the same traces and of their gradients, at the state a Boston fit reaches.

The state: :class:`pep_gp.DeepGPRegressor` (hidden width 2, M = 100) trained as ``bench_dgp`` trains it on
PBP split 0 (1,000 full-batch Adam steps at 0.01). At that state the output layer's inputs are the hidden
layer's Gaussians of the training rows under the cavities; its weights ``W`` are ``K⁻¹``, ``PᵀP`` and ``aaᵀ``;
the cotangent of the traces is the data term's own (for the Gaussian likelihood, ``∂ log Z/∂v`` times the
traces' signs in the variance). First the whole data term's gradient with each ψ₂ form (the comparison that
gave the issue's 9e-6), then, on ``--rows`` training rows, each form's value and gradients w.r.t. every input
of the traces against mpmath (analytic derivatives of the closed form, summed in 30 digits): per leaf the
largest error relative to the largest reference entry, and per entry. Writes
``benchmarks/results/psi2_precision.json``::

    OPENBLAS_NUM_THREADS=1 .venv/bin/python -m benchmarks.psi2_precision
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import jax.numpy as jnp
import mpmath
import numpy as np

from benchmarks._common import arguments, write_results
from benchmarks.bench_dgp import PAPERS_MODEL, load, pbp_splits
from pep_gp import DeepGPRegressor
from pep_gp.core import float64, psi_statistics
from pep_gp.core.bank import Bank
from pep_gp.core.kernels import SquaredExponential
from pep_gp.core.parameters import Positive
from pep_gp.core.psi_statistics import fixed_input_marginals, pair_terms, psi2_traces, trace_weights

DIGITS = 30


def _squared_exponential(ell, sf2):
    """G squared-exponential kernels of lengthscales ``ell`` ``[G, D]`` and variances ``sf2`` ``[G]`` (traceable)."""
    return SquaredExponential().replace(lengthscales=Positive(jnp.log(ell)), variance=Positive(jnp.log(sf2)))


def dense_traces(kernel, inducing, pairs, mean, var):
    """The previous implementation: ψ₂ ``[G, B, M, M]`` formed entry by entry from differences (one input
    dimension at a time), then contracted with the dense weights the pairs stand for."""
    first, second = np.triu_indices(inducing.shape[1])
    half = jnp.where(first == second, 1.0, 0.5) * pairs.weights  # W_mm', each pair's weight split evenly
    weights = jnp.zeros(pairs.weights.shape[:2] + (inducing.shape[1],) * 2, half.dtype)
    weights = weights.at[:, :, first, second].add(half).at[:, :, second, first].add(jnp.where(first == second, 0.0, half))
    ell2 = kernel.lengthscales.value[:, None, :] ** 2
    spread2 = ell2 + 2.0 * var[None]
    log_c2 = 0.5 * jnp.sum(jnp.log(ell2) - jnp.log(spread2), axis=-1)
    diff = mean[None, :, None, :] - inducing[:, None, :, :]
    exponent = 0.0
    for j in range(inducing.shape[-1]):
        half_gap = 0.5 * (inducing[:, :, None, j] - inducing[:, None, :, j])
        centred = 0.5 * (diff[..., j][:, :, :, None] + diff[..., j][:, :, None, :])
        exponent = exponent - (half_gap[:, None] ** 2 / kernel.lengthscales.value[:, None, None, None, j] ** 2
                               + centred**2 / spread2[:, :, None, None, j])
    psi2 = (kernel.variance.value[:, None] ** 2 * jnp.exp(log_c2))[..., None, None] * jnp.exp(exponent)
    return jnp.einsum("gbmn,grmn->bgr", psi2, weights)


def fitted_state(args):
    """The fitted regressor on PBP split 0 and its standardised training rows."""
    x, y = load("boston")
    train, _ = pbp_splits(x.shape[0], 1)[0]
    model = DeepGPRegressor(hidden_dims=(2,), num_inducing=100, max_iter=args.steps, tol=0, learning_rate=0.01,
                            seed=0, **PAPERS_MODEL).fit(x[train], y[train])
    return model, jnp.asarray((x[train] - model.x_mean_) / model.x_std_), jnp.asarray(model.targets_(y[train]))


def data_term_gradients(model, x, y):
    """The whole data term's gradient w.r.t. the parameters (through the step-shared quantities), with pep's
    traces and with the dense ψ₂ (``psi2_traces`` swapped), and the largest relative difference per leaf."""
    regression, params = model.model_, model.params_
    mask = jnp.ones(x.shape[0], bool)
    energy = lambda p: regression.data_energy(p, regression.step_shared(p, x.shape[0]), x, y, mask)
    gradients = {}
    for name, traces in (("pep", psi2_traces), ("dense", dense_traces)):
        psi_statistics.psi2_traces = traces
        try:
            value, grad = jax.jit(jax.value_and_grad(energy))(params)
        finally:
            psi_statistics.psi2_traces = psi2_traces
        gradients[name] = (float(value), grad)
    differences = {}
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(gradients["pep"][1]),
                            jax.tree_util.tree_leaves(gradients["dense"][1])):
        a, b = np.asarray(a), np.asarray(b)
        differences[jax.tree_util.keystr(path)] = float(np.max(np.abs(a - b)) / np.max(np.abs(b)))
    return {"value_pep": gradients["pep"][0], "value_dense": gradients["dense"][0],
            "largest_leaf_difference": max(differences.items(), key=lambda item: item[1]),
            "leaf_differences": differences}


def layer_two_problem(model, x, y, rows):
    """The output layer's inputs at ``rows`` training rows under the cavities, its weights and the data
    term's cotangent of the traces (``∂ log Z/∂v · (−1, 1, 1)``: FITC part, spread of u, variance of the mean)."""
    regression, params = model.model_, model.params_
    shared = regression.step_shared(params, x.shape[0])
    first, second = shared.layers
    hidden = fixed_input_marginals(regression.layer_bank(params.layers[0]), first.prior, first.gaussian, x[:rows])
    var = hidden.var + regression.likelihood.noise_variance(params.layers[0].likelihood)
    mean_out, var_out = regression.propagate(params, shared.layers, x[:rows])
    total = var_out + regression.likelihood.noise_variance(params.layers[-1].likelihood)
    slope = -0.5 / total + 0.5 * (y[:rows] - mean_out) ** 2 / total**2  # ∂ log N(y; m, v)/∂v
    cotangent = slope[:, None, None] * jnp.asarray([-1.0, 1.0, 1.0])  # [B, G = 1, 3]
    gps = regression.layer_bank(params.layers[1])
    return (np.asarray(gps.kernel.lengthscales.value), np.asarray(gps.kernel.variance.value), np.asarray(gps.inducing),
            np.asarray(hidden.mean), np.asarray(var), np.asarray(trace_weights(second.prior, second.gaussian)),
            np.asarray(cotangent))


def float64_forms(problem):
    """Value and gradients of ``J = Σ u · tr(Wψ₂)`` by pep's traces and by the dense ψ₂."""
    ell, sf2, z, mean, var, weights, cotangent = map(jnp.asarray, problem)
    out = {}
    for name, traces in (("pep", psi2_traces), ("dense", dense_traces)):
        def objective(ell, sf2, z, mean, var, weights):
            kernel = _squared_exponential(ell, sf2)
            return jnp.sum(cotangent * traces(kernel, z, pair_terms(Bank(kernel, z, 0 * sf2), weights), mean, var))
        value, grads = jax.jit(jax.value_and_grad(objective, argnums=tuple(range(6))))(ell, sf2, z, mean, var, weights)
        out[name] = [np.asarray(value)] + [np.asarray(g) for g in grads]
    return out


def mpmath_reference(problem):
    """``J`` and its gradients w.r.t. (ℓ, σ_f², Z, mean, var, W) from the closed form, in 30 digits: with
    ``e = log ψ₂``, ``∂J = Σ c·ψ₂·∂e`` for every input, ``c = Σ_r u_r W_r``."""
    ell, sf2, z, mean, var, weights, cotangent = problem
    mpf = mpmath.mpf
    rows, dims, size = mean.shape[0], mean.shape[1], z.shape[1]
    with mpmath.workdps(DIGITS):
        grad = {"ell": np.zeros((1, dims), object), "sf2": np.zeros(1, object), "z": np.zeros((1, size, dims), object),
                "mean": np.zeros((rows, dims), object), "var": np.zeros((rows, dims), object),
                "weights": np.zeros(weights.shape, object)}
        for key in grad:
            grad[key][...] = mpf(0)
        total = mpf(0)
        l2 = [mpf(float(ell[0, j])) ** 2 for j in range(dims)]
        amplitude = mpf(float(sf2[0])) ** 2
        zz = [[mpf(float(z[0, m, j])) for j in range(dims)] for m in range(size)]
        for b in range(rows):
            mu = [mpf(float(mean[b, j])) for j in range(dims)]
            s = [mpf(float(var[b, j])) for j in range(dims)]
            spread = [l2[j] + 2 * s[j] for j in range(dims)]
            scale = amplitude
            for j in range(dims):
                scale *= mpmath.sqrt(l2[j] / spread[j])
            for m in range(size):
                for n in range(size):
                    coefficient = sum(mpf(float(cotangent[b, 0, r])) * mpf(float(weights[0, r, m, n])) for r in range(3))
                    exponent = mpf(0)
                    terms = []
                    for j in range(dims):
                        gap = zz[m][j] - zz[n][j]
                        offset = mu[j] - (zz[m][j] + zz[n][j]) / 2
                        exponent -= gap**2 / (4 * l2[j]) + offset**2 / spread[j]
                        terms.append((gap, offset))
                    psi2 = scale * mpmath.exp(exponent)
                    for r in range(3):
                        grad["weights"][0, r, m, n] += mpf(float(cotangent[b, 0, r])) * psi2
                    weighted = coefficient * psi2
                    total += weighted
                    grad["sf2"][0] += 2 * weighted / mpf(float(sf2[0]))
                    for j, (gap, offset) in enumerate(terms):
                        ell_j = mpmath.sqrt(l2[j])
                        grad["ell"][0, j] += weighted * (1 / ell_j - ell_j / spread[j] + gap**2 / (2 * ell_j**3)
                                                         + 2 * ell_j * offset**2 / spread[j] ** 2)
                        grad["mean"][b, j] += weighted * (-2 * offset / spread[j])
                        grad["var"][b, j] += weighted * (-1 / spread[j] + 2 * offset**2 / spread[j] ** 2)
                        grad["z"][0, m, j] += weighted * (-gap / (2 * l2[j]) + offset / spread[j])
                        grad["z"][0, n, j] += weighted * (gap / (2 * l2[j]) + offset / spread[j])
        return [np.float64(total)] + [grad[k].astype(float) for k in ("ell", "sf2", "z", "mean", "var", "weights")]


def cancellation(problem):
    """Per weight ``W_r``, the largest over the rows of ``Σ|W ⊙ ψ₂| / |tr(Wψ₂)|`` (ψ₂ by the dense form,
    accurate to a few ε per entry): a float64 sum of such terms carries relative errors up to about ε
    times this, whatever the order of its terms."""
    ell, sf2, z, mean, var, weights, _ = map(jnp.asarray, problem)
    kernel = _squared_exponential(ell, sf2)
    out = []
    for r in range(weights.shape[1]):
        absolute = pair_terms(Bank(kernel, z, 0 * sf2), jnp.abs(weights[:, r:r + 1]))
        signed = pair_terms(Bank(kernel, z, 0 * sf2), weights[:, r:r + 1])
        ratio = dense_traces(kernel, z, absolute, mean, var) / jnp.abs(dense_traces(kernel, z, signed, mean, var))
        out.append(float(jnp.max(ratio)))
    return dict(zip(("K⁻¹", "PᵀP", "aaᵀ"), out))


def errors(forms, reference):
    names = ("J", "ell", "sf2", "z", "mean", "var", "weights")
    out = {}
    for form, values in forms.items():
        out[form] = {}
        for name, value, expected in zip(names, values, reference):
            value, expected = np.asarray(value, float), np.asarray(expected, float)
            per_entry = np.abs(value - expected) / np.maximum(np.abs(expected), np.finfo(float).tiny)
            out[form][name] = {"normwise": float(np.max(np.abs(value - expected)) / np.max(np.abs(expected))),
                               "per_entry_max": float(np.max(per_entry))}
    return out


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.psi2_precision``."""
    parser = arguments(__doc__)
    parser.add_argument("--steps", type=int, default=1000, help="Adam steps of the Boston fit")
    parser.add_argument("--rows", type=int, default=8, help="training rows of the mpmath comparison")
    return parser


def main(argv=None) -> dict:
    args = cli().parse_args(argv)
    start = time.perf_counter()
    model, x, y = fitted_state(args)
    with float64():
        whole = data_term_gradients(model, x, y)
        problem = layer_two_problem(model, x, y, args.rows)
        forms = float64_forms(problem)
        factors = cancellation(problem)
    reference = mpmath_reference(problem)
    results = {"settings": vars(args), "data_term": whole, "traces_vs_mpmath": errors(forms, reference),
               "cancellation_of_the_traces": factors,
               "seconds": time.perf_counter() - start, "load_average": os.getloadavg()}
    write_results("psi2_precision", results)
    return results


if __name__ == "__main__":
    main()
