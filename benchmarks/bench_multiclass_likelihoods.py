"""Seconds per training step of ``MultiClassGPClassifier`` with the paper's pairwise factors (eq. 6), with the
exact likelihood (``likelihood="exact"``) and with the softmax (``likelihood="softmax"``), side by side in one
process, on scikit-learn's digits (1,797 × 64, 10 classes) and on its first 3 classes (537 rows).

Each step is timed as the difference of two full-batch fits at the defaults but ``tol = 0`` (so each runs all of
its steps) and learned inducing inputs for all three (``train_inducing = True``, eq. (6)'s under ``likelihood = "auto"``):
``max_iter = 45`` less ``max_iter = 5``, over 40 steps, after a first fit that compiles; the median of
``--repeats`` such differences.

Usage:  .venv/bin/python -m benchmarks.bench_multiclass_likelihoods [--repeats 3] [--classes 3 10]
        [--name bench_multiclass_likelihoods]
Writes: benchmarks/results/<name>.json
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning

from benchmarks._common import arguments, write_results
from pep_gp import MultiClassGPClassifier

SHORT, LONG = 5, 45
LIKELIHOODS = ("pairwise", "exact", "softmax")


def _fit_seconds(x, y, likelihood: str, steps: int) -> float:
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        MultiClassGPClassifier(likelihood=likelihood, train_inducing=True, max_iter=steps, tol=0.0).fit(x, y)
    return time.perf_counter() - started


def seconds_per_step(x, y, likelihood: str, repeats: int) -> float:
    """The median over ``repeats`` of (a fit of LONG steps − a fit of SHORT steps) / (LONG − SHORT)."""
    _fit_seconds(x, y, likelihood, SHORT)  # compiles
    return float(np.median([(_fit_seconds(x, y, likelihood, LONG) - _fit_seconds(x, y, likelihood, SHORT))
                            / (LONG - SHORT) for _ in range(repeats)]))


def run(repeats: int, classes=(3, 10)) -> dict:
    x, y = load_digits(return_X_y=True)
    rows = {}
    for count in classes:
        name, xs, ys = f"digits, {count} classes", x[y < count], y[y < count]
        per_step = {likelihood: seconds_per_step(xs, ys, likelihood, repeats) for likelihood in LIKELIHOODS}
        rows[name] = {"rows": int(ys.size), "classes": int(np.unique(ys).size), "seconds_per_step": per_step,
                      **{f"{likelihood}_over_pairwise": per_step[likelihood] / per_step["pairwise"]
                         for likelihood in LIKELIHOODS[1:]}}
        print(name, rows[name], flush=True)
    return {"repeats": repeats, "steps_timed": LONG - SHORT, "sets": rows}


def table(results: dict) -> str:
    """Seconds per step of each likelihood and their ratio to the pairwise factors', per data set."""
    lines = ["| data | rows | classes | pairwise (eq. 6), s/step | exact, s/step | softmax, s/step | exact / pairwise "
             "| softmax / pairwise |", "|---|---|---|---|---|---|---|---|"]
    for name, row in results["sets"].items():
        per_step = row["seconds_per_step"]
        lines.append(f"| {name} | {row['rows']:,} | {row['classes']} | {per_step['pairwise']:.3f} | "
                     f"{per_step['exact']:.3f} | {per_step['softmax']:.3f} | {row['exact_over_pairwise']:.1f}× | "
                     f"{row['softmax_over_pairwise']:.1f}× |")
    return "\n".join(lines)


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.bench_multiclass_likelihoods``."""
    parser = arguments(__doc__, repeats=3, name="bench_multiclass_likelihoods")
    parser.add_argument("--classes", type=int, nargs="+", default=[3, 10],
                        help="the first C classes of digits, one data set each")
    return parser


def main() -> None:
    args = cli().parse_args()
    results = run(args.repeats, args.classes)
    write_results(args.name, results, echo=False)
    print(table(results))


if __name__ == "__main__":
    main()
