"""90 % interval coverage of the regressors at their defaults over repeated splits (issue 63, item 5), and the
count regressor's test NLL over the same kind of splits.

The everyday benchmark (:mod:`benchmarks.bench_everyday`) scores one 80/20 split per table, so a regressor's
coverage there is the fraction of about 100 test rows inside its 90 % interval: a standard error of about 0.03,
and one split's rows may be harder than the model's noise says for every model (on boston's seed-0 split
scikit-learn's exact GP covers 0.79). Coverage is a property of the predictive's calibration, so this benchmark
measures it as the mean over ``--splits`` random 80/20 splits (seeds 0, 1, …) with its standard error over the
splits, beside the same splits' test NLL.

The fits, in this one process (compilation is not what is measured here): pep's regressors at their defaults
(``SparseGPRegressor``, ``CollapsedGPRegressor``, ``DeepGPRegressor``; coverage by each one's own predictive
quantiles, 5 % and 95 %) and, as references, scikit-learn's exact GP and Bayesian ridge (their Gaussian
predictive's mean ± 1.645 standard deviations), as the everyday benchmark fits them. On the count table (coal's
89 training rows, whose one split's 18 test rows measure a test NLL to about ±0.1) the count default
``SparseGPRegressor(likelihood="poisson")`` beside Poisson regression, by test NLL (no interval coverage).

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
from .bench_everyday import OPTIONS, PEERS, PEP_FITS, TABLES, load_table, pep_scored, sklearn_fit

SCORED = {name: task for name, (task, _) in TABLES.items() if task in ("regression", "counts")}
FITS = {"regression": [*PEERS["regression"][:2], *PEP_FITS["regression"]],  # Bayesian ridge, scikit-learn GP, pep's
        "counts": [*PEERS["counts"], *PEP_FITS["counts"]]}  # Poisson regression, pep's count default
COVERAGE = (0.85, 0.95)  # the goal for a central 90 % interval


def scored(fit: str, task: str, x_train, y_train, x_test, y_test) -> dict:
    """Coverage (regression), test NLL and fit seconds of ``fit`` on one split."""
    if fit in PEERS[task]:
        result = sklearn_fit(fit, task, x_train, y_train, x_test, y_test)
        seconds = result["fit_seconds"]
    else:
        import pep_gp

        estimator, options = OPTIONS.get(fit, (fit, {}))
        started = time.perf_counter()
        model = getattr(pep_gp, estimator)(**options).fit(x_train, y_train)
        seconds = time.perf_counter() - started
        result = pep_scored(task, model, x_test, y_test)
    coverage = {"coverage_90": round(result["coverage_90"], 4)} if task == "regression" else {}
    return {**coverage, "test_nll": round(float(np.mean(result["per_row_nll"])), 5), "fit_seconds": round(seconds, 2)}


def summary(splits: list[dict]) -> dict:
    """Mean and standard error over the splits of test NLL, and of coverage with its range (where scored)."""
    nll = [split["test_nll"] for split in splits]
    result = {"nll_mean": round(float(np.mean(nll)), 4), "nll_se": round(standard_error(nll), 4)}
    if "coverage_90" not in splits[0]:
        return result
    coverage = [split["coverage_90"] for split in splits]
    return {"coverage_mean": round(float(np.mean(coverage)), 4), "coverage_se": round(standard_error(coverage), 4),
            "coverage_min": min(coverage), "coverage_max": max(coverage), **result}


def table(result: dict) -> str:
    """The docs table: per table and fit, the mean 90 % coverage over the splits ± its standard error (in bold
    where it lies outside :data:`COVERAGE`), its range over the splits, and the mean test NLL ± standard error."""
    lines = ["| table | fit | 90 % coverage, mean ± s.e. | lowest, highest split | test NLL, mean ± s.e. | splits |",
             "|---|---|---|---|---|---|"]
    for name, fits in result["tables"].items():
        for fit, record in fits.items():
            s = record["summary"]
            mean, spread = "–", "–"
            if "coverage_mean" in s:
                mean = f"{s['coverage_mean']:.3f} ± {s['coverage_se']:.3f}"
                mean = mean if COVERAGE[0] <= s["coverage_mean"] <= COVERAGE[1] else f"**{mean}**"
                spread = f"{s['coverage_min']:.2f}, {s['coverage_max']:.2f}"
            lines.append(f"| {name} | {fit} | {mean} | {spread} | {s['nll_mean']:.4f} ± {s['nll_se']:.4f} "
                         f"| {len(record['splits'])} |")
    return "\n".join(lines)


def cli() -> argparse.ArgumentParser:
    parser = arguments(__doc__, name="bench_coverage", splits=5)
    parser.add_argument("--tables", nargs="+", choices=list(SCORED), default=list(SCORED))
    parser.add_argument("--fits", nargs="+", choices=[fit for fits in FITS.values() for fit in fits],
                        help="of each table's task's fits, those named (default: all)")
    return parser


def main() -> None:
    args = cli().parse_args()
    results: dict = {"splits": args.splits, "load_at_start": uptime(), "tables": {}}
    for name in args.tables:
        task = SCORED[name]
        rows: dict = {fit: {"splits": []} for fit in FITS[task] if args.fits is None or fit in args.fits}
        for seed in range(args.splits):
            x_train, y_train, x_test, y_test, _ = load_table(name, seed)
            for fit in rows:
                rows[fit]["splits"].append({"seed": seed, **scored(fit, task, x_train, y_train, x_test, y_test)})
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
