"""Seconds per training step of a deep GP with the squared exponential (closed-form ψ-statistics) and with other
kernels (ψ-statistics by Gauss–Hermite quadrature over the hidden layer's Gaussian input,
:mod:`pep_gp.core.input_quadrature`), at one realistic size: Boston's shape in Bui et al. (2016, §8.2), 455
training rows of 13 standardised inputs, one hidden layer of width 2, M inducing points per GP, every row in
every step (the protocol's full batch).

A step is the value and gradient of the energy (:meth:`pep_gp.core.models.deep_gp.DeepGP.energy`: the
factorisations, the global term and the data term over all rows), compiled once per kernel before timing.
The kernels' steps alternate one by one (SE, Matérn-5/2, …, SE, …), ``--steps`` times in each of ``--rounds``
rounds, so that a change in the machine's load falls on all; reported: each kernel's median step, the median
over the alternations of its step's ratio to the squared exponential's step beside it (robust to the load),
and XLA's own count of the compiled step's flops and bytes accessed (deterministic, whatever the load; XLA
counts the body of the data term's ``lax.scan`` once, so this is the global term plus one 32-row chunk). The rows are
synthetic (standard normal inputs, ``sin`` of a projection plus noise, seed 0): the step's cost does not depend
on the values.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python -m benchmarks.bench_dgp_kernels --rounds 5 --steps 10

writes ``benchmarks/results/bench_dgp_kernels.json``; :func:`table` draws it (docs/results/deep-gp.md).
"""

from __future__ import annotations

import time

import jax
import numpy as np

from benchmarks._common import arguments, write_results
from pep_gp.core import float64
from pep_gp.core.input_quadrature import DEFAULT_POINTS
from pep_gp.core.kernels import parse
from pep_gp.core.likelihoods import Gaussian
from pep_gp.core.models.deep_gp import DeepGP

KERNELS = {"se": None, "matern52": "matern52", "matern52 (3 points)": "matern52", "matern52+linear": "matern52+linear",
           "matern12": "matern12"}
"""Label → kernel spelling (None: the model's default squared exponential); the label's "(n points)" sets the
Gauss–Hermite points per hidden dimension (default :data:`pep_gp.core.input_quadrature.DEFAULT_POINTS`)."""


def step_function(kernel: str | None, points: int, x, y, hidden, num_inducing):
    """The compiled value-and-gradient of the energy and the starting parameters of one deep GP."""
    model = DeepGP(Gaussian(), quadrature_points=points)
    params = model.init(x, hidden, num_inducing, kernel=None if kernel is None else parse(kernel))
    compiled = jax.jit(jax.value_and_grad(model.energy)).lower(params, x, y).compile()
    analysis = compiled.cost_analysis()
    analysis = analysis[0] if isinstance(analysis, list) else analysis
    return compiled, params, {"flops": analysis.get("flops", 0.0), "bytes": analysis.get("bytes accessed", 0.0)}


def cli():
    parser = arguments(__doc__, name="bench_dgp_kernels", steps=10)
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (default: %(default)s)")
    parser.add_argument("--rows", type=int, default=455, help="training rows (default: %(default)s, Boston's)")
    parser.add_argument("--dims", type=int, default=13, help="input columns (default: %(default)s)")
    parser.add_argument("--inducing", type=int, default=100, help="M per GP (default: %(default)s)")
    parser.add_argument("--hidden", type=int, nargs="*", default=[2], help="hidden widths (default: %(default)s)")
    parser.add_argument("--kernels", nargs="+", default=list(KERNELS), choices=list(KERNELS))
    return parser


def main():
    with float64():
        run(cli().parse_args())


def run(args):
    """Compile every kernel's step, time them in alternating rounds and write the results."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.rows, args.dims))
    y = np.sin(x @ rng.normal(size=args.dims) / np.sqrt(args.dims)) + 0.1 * rng.normal(size=args.rows)
    x, y = jax.numpy.asarray(x), jax.numpy.asarray(y)
    steps = {}
    for label in args.kernels:
        points = int(label.split("(")[1].split()[0]) if "(" in label else DEFAULT_POINTS
        steps[label] = step_function(KERNELS[label], points, x, y, tuple(args.hidden), args.inducing)
    seconds = {label: [] for label in steps}
    for _ in range(args.rounds * args.steps):
        for label, (step, params, _) in steps.items():
            start = time.perf_counter()
            jax.block_until_ready(step(params, x, y))
            seconds[label].append(time.perf_counter() - start)
    times = {label: np.asarray(values) for label, values in seconds.items()}
    write_results(args.name, {
        "settings": {"rows": args.rows, "dims": args.dims, "inducing": args.inducing, "hidden": args.hidden,
                     "rounds": args.rounds, "steps": args.steps, "default_points": DEFAULT_POINTS},
        "seconds_per_step": {label: float(np.median(values)) for label, values in times.items()},
        "median_ratio_to_se": ({label: float(np.median(values / times["se"])) for label, values in times.items()}
                               if "se" in times else {}),
        "xla_cost": {label: cost for label, (_, _, cost) in steps.items()},
        "xla_flops_ratio_to_se": ({label: cost["flops"] / steps["se"][2]["flops"] for label, (_, _, cost) in steps.items()}
                                  if "se" in steps else {}),
    })


def table(result: dict) -> str:
    """One row per kernel: seconds per step, the median paired ratio to the SE's step and XLA's flops ratio (the
    global term and one 32-row chunk of the data term)."""
    settings, load = result["settings"], result["machine"]["load_avg"][0]
    lines = [f"| kernel ({settings['rows']} rows, {settings['dims']} inputs, hidden {settings['hidden']}, "
             f"M = {settings['inducing']}; load {load:.1f}) | seconds per step | × SE (paired median) | × SE (XLA flops, one chunk) |",
             "|---|---|---|---|"]
    for label, seconds in result["seconds_per_step"].items():
        lines.append(f"| {label} | {seconds:.3f} | {result['median_ratio_to_se'][label]:.2f} | "
                     f"{result['xla_flops_ratio_to_se'][label]:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
