"""Energy + gradient time of pep's Power-EP objectives against N and M, with fitted exponents.

Measures ``jit(value_and_grad)`` of
  * the tied-factor Power-EP energy (probit, α = 0.5; ``pep_gp.core.models.power_ep``) and
  * the collapsed PEP-α regression objective (α = 0.5; ``pep_gp.core.models.collapsed_regression``),
expected O(N·M²), side by side with the exact GP evidence + gradient (O(N³)) at the same N.

Usage:  .venv/bin/python -m benchmarks.bench_energy_scaling [--quick]
Writes: benchmarks/results/energy_scaling.json
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

import pep_gp.core
from benchmarks._common import arguments, best_time, loglog_slope, write_results
from pep_gp.core.gaussian import log_density
from pep_gp.core.likelihoods import Probit
from pep_gp.core.linalg import DEFAULT_JITTER
from pep_gp.core.models import collapsed_regression
from pep_gp.core.models.power_ep import PowerEPSparseGP

D = 8


def _data(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, D))
    f = np.sin(x[:, 0]) + 0.5 * x[:, 1]
    return jnp.asarray(x), jnp.asarray(f + 0.3 * rng.normal(size=n)), jnp.asarray((f > 0).astype(float))


def _tied(n: int, m: int):
    x, _, labels = _data(n)
    model = PowerEPSparseGP(Probit(), alpha=0.5)
    params = model.init(np.asarray(x[:m]), m, inducing=np.asarray(x[:m]))
    step = jax.jit(jax.value_and_grad(lambda p: model.energy(p, x, labels)))
    return lambda: step(params)


def _collapsed(n: int, m: int):
    x, y, _ = _data(n)
    params = collapsed_regression.RegressionParams(jnp.zeros(D), jnp.asarray(0.5), jnp.asarray(-2.0), x[:m])
    step = jax.jit(jax.value_and_grad(lambda p: collapsed_regression.energy(p, x, y, 0.5)))
    return lambda: step(params)


def _exact(n: int):
    x, y, _ = _data(n)
    params = collapsed_regression.RegressionParams(jnp.zeros(D), jnp.asarray(0.5), jnp.asarray(-2.0), x[:1])

    def evidence(p):
        k = p.kernel(x, x) + (p.noise_variance + DEFAULT_JITTER) * jnp.eye(n)
        return log_density(y, jnp.zeros(n), k)

    step = jax.jit(jax.value_and_grad(evidence))
    return lambda: step(params)


def _sweep(make, sizes, repeats):
    return [best_time(make(s), repeats) for s in sizes]


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.bench_energy_scaling``."""
    parser = arguments(__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller grids, fewer repeats")
    return parser


def main(quick: bool) -> None:
    repeats = 3 if quick else 7
    n_grid = [2_000, 4_000, 8_000] if quick else [2_000, 4_000, 8_000, 16_000, 32_000]
    m_grid = [32, 64, 128] if quick else [32, 64, 128, 256, 512]
    exact_grid = [500, 1_000, 2_000] if quick else [500, 1_000, 2_000, 4_000]
    m_fixed, n_fixed = 64, 8_000
    with pep_gp.core.float64():
        results = {"settings": {"D": D, "M_for_N_sweep": m_fixed, "N_for_M_sweep": n_fixed, "repeats": repeats,
                                "statistic": "min seconds of jit(value_and_grad) after compile"}}
        for name, make in [("tied_power_ep_probit", _tied), ("collapsed_regression", _collapsed)]:
            t_n = _sweep(lambda n: make(n, m_fixed), n_grid, repeats)
            t_m = _sweep(lambda m: make(n_fixed, m), m_grid, repeats)
            results[name] = {
                "vs_N": dict(zip(map(str, n_grid), t_n)), "exponent_N": loglog_slope(n_grid, t_n),
                "vs_M": dict(zip(map(str, m_grid), t_m)), "exponent_M": loglog_slope(m_grid, t_m),
                "exponent_M_upper_half": loglog_slope(m_grid[-3:], t_m[-3:]),
            }
        t_exact = _sweep(_exact, exact_grid, max(1, repeats // 2))
        results["baseline_exact_gp"] = {"vs_N": dict(zip(map(str, exact_grid), t_exact)),
                                        "exponent_N": loglog_slope(exact_grid, t_exact)}
        results["same_N_comparison"] = {
            str(n): {"exact_gp": te, "collapsed_M64": _sweep(lambda k: _collapsed(k, m_fixed), [n], repeats)[0]}
            for n, te in zip(exact_grid[-2:], t_exact[-2:])
        }
    write_results("energy_scaling", results)


if __name__ == "__main__":
    main(cli().parse_args().quick)
