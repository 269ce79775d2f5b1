"""The 2-D collapse case of issue 37: ``SparseGPClassifier()`` at its defaults on two Gaussians shifted by ±1
in the first of two features (400 training rows, 1,000 test rows), over 20 seeds × 5 scalings of the inputs.

Usage::

    .venv/bin/python benchmarks/bench_collapse.py [--seeds 20] [--out NAME]

Per run: the test error, the spread of the test probabilities, ``converged_``, whether a
``ConvergenceWarning`` was raised, the steps, and the energy trace's best step energy (and its step), best
25-step window mean and last window mean. Writes ``benchmarks/results/bench_collapse.json`` with the runs
and the counts the issue asks for: runs that end with test error > 0.25 while reporting convergence (must
be 0), and collapsed runs (the last window mean at or below ``−N log 2``, the energy of predicting 0.5
everywhere, whatever the trainer's own threshold says) that were not reported (must be 0).
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from benchmarks._common import arguments, write_results
from pep_gp import SparseGPClassifier

SCALINGS = (1.0, 1.0 + 1e-9, 3.0, 1e3, 1e12)
WINDOW = 25  # the stopping rule's window at full batch (pep_gp.pipeline.training.stopping.MIN_WINDOW)
BAD_ERROR = 0.25


def two_gaussians(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` rows: balanced labels, ``x ~ N((±1, 0), I)``."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    x = rng.normal(size=(n, 2))
    x[:, 0] += np.where(y == 1, 1.0, -1.0)
    return x, y


def window_means(energies: np.ndarray) -> np.ndarray:
    """The mean of every ``WINDOW`` consecutive step energies."""
    return np.convolve(energies, np.ones(WINDOW) / WINDOW, mode="valid")


def one_run(seed: int, scaling: float) -> dict:
    x, y = two_gaussians(seed, 400)
    x_test, y_test = two_gaussians(10_000 + seed, 1_000)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        model = SparseGPClassifier(seed=seed).fit(x * scaling, y)
    proba = model.predict_proba(x_test * scaling)[:, 1]
    energies = np.asarray(model.energy_trace_)
    means = window_means(energies) if energies.size >= WINDOW else np.array([np.nan])
    return {"seed": seed, "scaling": scaling, "test_error": float(np.mean((proba > 0.5) != y_test)),
            "proba_std": float(proba.std()), "converged": bool(model.converged_),
            "warned": any(issubclass(w.category, ConvergenceWarning) for w in caught), "steps": int(model.n_iter_),
            "best_energy": float(energies.max()), "best_step": int(energies.argmax()),
            "best_window_mean": float(means.max()), "last_window_mean": float(means[-1]),
            "fall_per_row": float((means.max() - means[-1]) / 400), "seconds": round(time.perf_counter() - start, 2)}


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.bench_collapse``."""
    parser = arguments(__doc__)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--out", default="bench_collapse")
    return parser


def main() -> None:
    args = cli().parse_args()
    runs = []
    for seed in range(args.seeds):
        runs += [one_run(seed, scaling) for scaling in SCALINGS]
        write_results(args.out, summary(runs))  # after every seed: a long sweep leaves its runs so far


def summary(runs: list[dict]) -> dict:
    """The runs and the counts of the module docstring."""
    collapsed = [r for r in runs if r["last_window_mean"] <= -400 * np.log(2)]  # every probability ~0.5
    return {
        "runs": runs, "n_runs": len(runs),
        "bad_and_converged": sum(r["test_error"] > BAD_ERROR and r["converged"] for r in runs),
        "test_error_above_0.25": sum(r["test_error"] > BAD_ERROR for r in runs),
        "collapsed": len(collapsed),
        "collapsed_unreported": sum(r["converged"] or not r["warned"] for r in collapsed),
        "test_error_median": float(np.median([r["test_error"] for r in runs])),
        "test_error_max": float(max(r["test_error"] for r in runs))}


if __name__ == "__main__":
    main()
