"""Predictive quantiles of the non-Gaussian predictives (``predict_quantiles``, ``pep predict --quantiles``):
Newton's method on the predictive CDF (:func:`pep_gp.core.gaussian.newton_quantiles`, what pep runs) beside
64 bisection halvings of the same bracket (:func:`pep_gp.core.gaussian.bisect_quantiles`, what pep ran before),
on the same rows in the same run.

Cases: the Student-t regressor's predictive (ν = 2.5 and ν = 1.5, σ = 0.5; Gauss–Hermite over ``f``, the
CDF by the incomplete beta function) and the deep GP's mixture of 256 Gaussians; ``--rows`` rows of latent
means and variances from a fixed seed, levels 0.05 / 0.5 / 0.95. Reported per case: the best of ``--repeats``
warm calls of each compiled program (compilation excluded), the speed-up, the largest difference between the
two methods' quantiles, and the largest ``|CDF(q) − p|`` of each.

    python -m benchmarks.bench_quantiles

writes ``benchmarks/results/bench_quantiles.json`` (``bench_quantiles_gpu*.json``: the same command on an
H100, ``--rows 1000`` and ``--rows 100000 --repeats 3``, copied under those names); ``--table`` prints the
results page's table from it (docs/results/likelihoods.md, ``python -m docs.results``).
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks._common import arguments, best_time, read_results, write_results

NAME = "bench_quantiles"
LEVELS = (0.05, 0.5, 0.95)
COMPONENTS = 256


def student_t_case(dof: float, rows: int):
    """The Student-t regressor's predictive quantiles (σ = 0.5) at ``rows`` random latent moments."""
    from pep_gp.core.likelihoods import StudentT

    rng = np.random.default_rng(0)
    mean, var = jnp.asarray(rng.normal(0, 2, rows)), jnp.asarray(rng.uniform(0.01, 1.0, rows))
    likelihood = StudentT()
    levels = jnp.tile(jnp.asarray(LEVELS), (rows, 1))
    return likelihood.quantile_problem(likelihood.init_params(0.5, dof), mean, var, levels)


def mixture_case(rows: int):
    """A deep-GP-like mixture of :data:`COMPONENTS` Gaussians per row."""
    from pep_gp.core.gaussian import mixture_problem

    rng = np.random.default_rng(1)
    means = jnp.asarray(rng.normal(0, 1, (COMPONENTS, rows)) + rng.normal(0, 3, rows))
    stds = jnp.asarray(rng.uniform(0.1, 1.0, (COMPONENTS, rows)))
    return mixture_problem(means, stds, jnp.tile(jnp.asarray(LEVELS), (rows, 1)))


def measure(case, repeats: int) -> dict:
    """Both methods on one :class:`~pep_gp.core.gaussian.QuantileProblem`: best warm seconds, their agreement
    and how well each solves ``CDF(q) = p``."""
    from pep_gp.core.gaussian import bisect_quantiles, newton_quantiles

    methods = {"newton": jax.jit(lambda: newton_quantiles(case)),
               "bisection": jax.jit(lambda: bisect_quantiles(case.cdf, case.lower, case.upper, case.levels))}
    seconds = {name: best_time(fn, repeats) for name, fn in methods.items()}
    got = {name: fn() for name, fn in methods.items()}
    out = {f"{name}_seconds": value for name, value in seconds.items()}
    out["speed_up"] = seconds["bisection"] / seconds["newton"]
    out["max_difference"] = float(jnp.max(jnp.abs(got["newton"] - got["bisection"])))
    for name, quantiles in got.items():
        out[f"{name}_cdf_error"] = float(jnp.max(jnp.abs(case.cdf(quantiles) - case.levels)))
    return out


def run(rows: int, repeats: int) -> dict:
    from pep_gp.core import float64

    with float64():
        cases = {"student-t, ν = 2.5": student_t_case(2.5, rows), "student-t, ν = 1.5": student_t_case(1.5, rows),
                 f"deep GP mixture of {COMPONENTS}": mixture_case(rows)}
        return {"settings": {"rows": rows, "repeats": repeats, "levels": list(LEVELS)},
                "cases": {name: measure(case, repeats) for name, case in cases.items()}}


def table(result: dict) -> str:
    lines = ["| predictive | rows × levels | Newton, s | bisection (64 halvings), s | speed-up | largest difference | "
             "largest \\|CDF(q) − p\\|, Newton / bisection |", "|---|---|---|---|---|---|---|"]
    shape = f"{result['settings']['rows']:,} × {len(result['settings']['levels'])}"
    for name, case in result["cases"].items():
        lines.append(f"| {name} | {shape} | {case['newton_seconds']:.4f} | {case['bisection_seconds']:.4f} | "
                     f"{case['speed_up']:.1f}× | {case['max_difference']:.1e} | {case['newton_cdf_error']:.1e} / "
                     f"{case['bisection_cdf_error']:.1e} |")
    machine = result["machine"]
    lines.append(f"\n{', '.join(machine['devices'])} ({machine['cpus']} cores), JAX {machine['jax']}, load average "
                 f"{machine['load_avg'][0]}; best of {result['settings']['repeats']} warm calls each.")
    return "\n".join(lines)


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.bench_quantiles``."""
    parser = arguments(__doc__, name=NAME, repeats=5)
    parser.add_argument("--rows", type=int, default=1_000)
    parser.add_argument("--table", action="store_true", help="print the table of the committed results/NAME.json")
    return parser


def main() -> None:
    args = cli().parse_args()
    if args.table:
        print(table(read_results(args.name)))
        return
    write_results(args.name, run(args.rows, args.repeats))


if __name__ == "__main__":
    main()
