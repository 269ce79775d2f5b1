"""90 % interval coverage of the regressors at their defaults over repeated splits (issue 63, item 5).

The everyday benchmark (:mod:`benchmarks.bench_everyday`) scores one 80/20 split per table, so a regressor's
coverage there is the fraction of about 100 test rows inside its 90 % interval: a standard error of about 0.03,
and one split's rows may be harder than the model's noise says for every model (on boston's seed-0 split
scikit-learn's exact GP covers 0.79). Coverage is a property of the predictive's calibration, so this benchmark
measures it as the mean over ``--splits`` random 80/20 splits (seeds 0, 1, …) with its standard error over the
splits, beside the same splits' test NLL.

The fits, in this one process (compilation is not what is measured here): pep's regressors at their defaults
(``SparseGPRegressor``, ``CollapsedGPRegressor``, ``DeepGPRegressor``; coverage by each one's own predictive
quantiles, 5 % and 95 %) and, as references, scikit-learn's exact GP and Bayesian ridge (their Gaussian
predictive's mean ± 1.645 standard deviations), as the everyday benchmark fits them.

Usage::

    .venv/bin/python -m benchmarks.bench_coverage [--splits 5] [--tables boston ...] [--fits NAME ...]
        [--name bench_coverage]

Writes ``benchmarks/results/NAME.json``. Needs the ``bench`` extra's data readers (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ._common import arguments, machine, standard_error, uptime, write_results
from .bench_everyday import PEERS, PEP_FITS, TABLES, load_table, pep_scored, sklearn_fit

REGRESSION = [name for name, (task, _) in TABLES.items() if task == "regression"]
FITS = [*PEERS["regression"][:2], *PEP_FITS["regression"]]  # Bayesian ridge, scikit-learn GP, pep's regressors
COVERAGE = (0.85, 0.95)  # the goal for a central 90 % interval


def scored(fit: str, x_train, y_train, x_test, y_test) -> dict:
    """Coverage, test NLL and fit seconds of ``fit`` on one split."""
    if fit in PEERS["regression"]:
        result = sklearn_fit(fit, "regression", x_train, y_train, x_test, y_test)
        seconds = result["fit_seconds"]
    else:
        import pep_gp

        started = time.perf_counter()
        model = getattr(pep_gp, fit)().fit(x_train, y_train)
        seconds = time.perf_counter() - started
        result = pep_scored("regression", model, x_test, y_test)
    return {"coverage_90": round(result["coverage_90"], 4), "test_nll": round(float(np.mean(result["per_row_nll"])), 5),
            "fit_seconds": round(seconds, 2)}


def summary(splits: list[dict]) -> dict:
    """Mean and standard error over the splits of coverage and test NLL, and coverage's range."""
    coverage = [split["coverage_90"] for split in splits]
    nll = [split["test_nll"] for split in splits]
    return {"coverage_mean": round(float(np.mean(coverage)), 4), "coverage_se": round(standard_error(coverage), 4),
            "coverage_min": min(coverage), "coverage_max": max(coverage),
            "nll_mean": round(float(np.mean(nll)), 4), "nll_se": round(standard_error(nll), 4)}


def table(result: dict) -> str:
    """The docs table: per table and fit, the mean 90 % coverage over the splits ± its standard error (in bold
    where it lies outside :data:`COVERAGE`), its range over the splits, and the mean test NLL ± standard error."""
    lines = ["| table | fit | 90 % coverage, mean ± s.e. | lowest, highest split | test NLL, mean ± s.e. | splits |",
             "|---|---|---|---|---|---|"]
    for name, fits in result["tables"].items():
        for fit, record in fits.items():
            s = record["summary"]
            mean = f"{s['coverage_mean']:.3f} ± {s['coverage_se']:.3f}"
            if not COVERAGE[0] <= s["coverage_mean"] <= COVERAGE[1]:
                mean = f"**{mean}**"
            lines.append(f"| {name} | {fit} | {mean} | {s['coverage_min']:.2f}, {s['coverage_max']:.2f} "
                         f"| {s['nll_mean']:.4f} ± {s['nll_se']:.4f} | {len(record['splits'])} |")
    return "\n".join(lines)


def cli() -> argparse.ArgumentParser:
    parser = arguments(__doc__, name="bench_coverage", splits=5)
    parser.add_argument("--tables", nargs="+", choices=REGRESSION, default=REGRESSION)
    parser.add_argument("--fits", nargs="+", choices=FITS, default=FITS)
    return parser


def main() -> None:
    args = cli().parse_args()
    results: dict = {"splits": args.splits, "load_at_start": uptime(), "tables": {}}
    for name in args.tables:
        rows: dict = {fit: {"splits": []} for fit in args.fits}
        for seed in range(args.splits):
            x_train, y_train, x_test, y_test, _ = load_table(name, seed)
            for fit in args.fits:
                rows[fit]["splits"].append({"seed": seed, **scored(fit, x_train, y_train, x_test, y_test)})
                print(f"{name:>10} split {seed} {fit:<22} {rows[fit]['splits'][-1]}", flush=True)
        for record in rows.values():
            record["summary"] = summary(record["splits"])
        results["tables"][name] = rows
    results["load_at_end"] = uptime()
    results["machine"] = machine()
    write_results(args.name, results)
    print(table(results))


if __name__ == "__main__":
    main()
