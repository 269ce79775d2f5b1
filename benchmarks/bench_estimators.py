"""The estimators at their default settings against logistic regression, on the same splits.

Datasets: scikit-learn's iris, wine (multi-class: ``MultiClassGPClassifier()``) and breast cancer
(binary: ``SparseGPClassifier()``; ``breast_cancer_ard``: ``SparseGPClassifier(ard=True)``, one lengthscale
per input; ``breast_cancer_exact_ep``: ``SparseGPClassifier(sites="untied")``, exact-GP
EP), each as ``--splits`` stratified 80/20 splits (``random_state=0``);
Fashion-MNIST subsets (``MultiClassGPClassifier()``): per split a stratified random sample of
``--fmnist-rows`` training images and 2,000 test images. Logistic regression is scikit-learn's
(L2, C = 1, inputs standardised with the training rows' statistics); the GP estimators standardise
internally. Reports per dataset the mean ± standard error over splits of the test NLL and error of both,
the paired NLL difference (GP − LR), the GP's fitting seconds, steps (exact EP: L-BFGS-B iterations) and
whether it converged.

Usage:  .venv/bin/python -m benchmarks.bench_estimators [--splits 5] [--datasets iris wine ...]
            [--fmnist-rows 1000 ...] [--mnist-dir /usr/share/datasets/fashion-mnist] [--name bench_estimators]
Writes: benchmarks/results/NAME.json
"""

from __future__ import annotations

import argparse
import time
import warnings
from functools import partial
from pathlib import Path

import numpy as np
from sklearn.datasets import load_breast_cancer, load_iris, load_wine
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss
from sklearn.model_selection import StratifiedShuffleSplit
from sklearn.preprocessing import StandardScaler

from benchmarks._common import standard_error, write_results
from pep_gp import MultiClassGPClassifier, SparseGPClassifier
from pep_gp.pipeline.data.sources import SourceRequest, open_source
from pep_gp.pipeline.data.sources.mnist import DEBIAN_DIR

FMNIST_TEST_ROWS = 2000


def _sklearn_splits(load, splits: int):
    x, y = load(return_X_y=True)
    for train, test in StratifiedShuffleSplit(splits, test_size=0.2, random_state=0).split(x, y):
        yield x[train], y[train], x[test], y[test]


def _fashion_mnist_splits(rows: int, splits: int, directory: Path):
    blocks = list(open_source("mnist", SourceRequest((directory,))).read())
    x = np.concatenate([b.X for b in blocks])
    y = np.concatenate([b.y for b in blocks]).astype(int)
    is_test = np.concatenate([b.is_test for b in blocks])
    train, test = np.flatnonzero(~is_test), np.flatnonzero(is_test)
    for seed in range(splits):
        rng = np.random.default_rng(seed)
        picked = next(StratifiedShuffleSplit(1, train_size=rows, random_state=seed).split(x[train], y[train]))[0]
        test_rows = rng.choice(test, FMNIST_TEST_ROWS, replace=False)
        yield x[train[picked]], y[train[picked]], x[test_rows], y[test_rows]


DATASETS = {
    "iris": (lambda k: _sklearn_splits(load_iris, k), MultiClassGPClassifier),
    "wine": (lambda k: _sklearn_splits(load_wine, k), MultiClassGPClassifier),
    "breast_cancer": (lambda k: _sklearn_splits(load_breast_cancer, k), SparseGPClassifier),
    "breast_cancer_ard": (lambda k: _sklearn_splits(load_breast_cancer, k), partial(SparseGPClassifier, ard=True)),
    "breast_cancer_exact_ep": (lambda k: _sklearn_splits(load_breast_cancer, k),
                               partial(SparseGPClassifier, sites="untied")),
}


def _scores(y_test, proba, classes) -> tuple[float, float]:
    return float(log_loss(y_test, proba, labels=classes)), float(np.mean(classes[proba.argmax(1)] != y_test))


def _fit_both(estimator, x_train, y_train, x_test, y_test) -> dict:
    scaler = StandardScaler().fit(x_train)
    logistic = LogisticRegression(max_iter=1000).fit(scaler.transform(x_train), y_train)
    lr_nll, lr_error = _scores(y_test, logistic.predict_proba(scaler.transform(x_test)), logistic.classes_)
    started = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        gp = estimator().fit(x_train, y_train)
    seconds = time.perf_counter() - started
    gp_nll, gp_error = _scores(y_test, gp.predict_proba(x_test), gp.classes_)
    return {"gp_nll": gp_nll, "gp_error": gp_error, "lr_nll": lr_nll, "lr_error": lr_error,
            "gp_seconds": round(seconds, 2), "gp_steps": int(gp.n_iter_), "gp_converged": bool(gp.converged_),
            "warnings": len(caught)}


def _summary(runs: list[dict]) -> dict:
    def mean_se(values):
        return [round(float(np.mean(values)), 4), round(standard_error(values), 4)]

    keys = ("gp_nll", "lr_nll", "gp_error", "lr_error", "gp_seconds", "gp_steps")
    summary = {key: mean_se([r[key] for r in runs]) for key in keys}
    summary["nll_difference"] = mean_se([r["gp_nll"] - r["lr_nll"] for r in runs])
    summary["converged"] = sum(r["gp_converged"] for r in runs)
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", type=int, default=5)
    parser.add_argument("--fmnist-rows", type=int, nargs="*", default=[1000])
    parser.add_argument("--datasets", nargs="*", default=[*DATASETS, "fashion_mnist"])
    parser.add_argument("--mnist-dir", type=Path, default=DEBIAN_DIR)
    parser.add_argument("--name", default="bench_estimators", help="results/NAME.json")
    args = parser.parse_args()
    datasets = {name: DATASETS[name] for name in args.datasets if name in DATASETS}
    if "fashion_mnist" in args.datasets:
        for rows in args.fmnist_rows:
            datasets[f"fashion_mnist_{rows}"] = (
                lambda k, rows=rows: _fashion_mnist_splits(rows, k, args.mnist_dir), MultiClassGPClassifier)
    results = {}
    for name, (splits, estimator) in datasets.items():
        runs = []
        for i, split in enumerate(splits(args.splits)):
            runs.append(_fit_both(estimator, *split))
            print(name, i, runs[-1], flush=True)
        results[name] = {"estimator": repr(estimator()), "splits": runs, "summary": _summary(runs)}
        write_results(args.name, {  # after every dataset: a run cut short keeps what it finished
            "protocol": "stratified 80/20 splits (random_state=0) of the scikit-learn sets; Fashion-MNIST: a "
                        f"stratified sample of the training images per split and {FMNIST_TEST_ROWS} test images; "
                        "GP estimators at their defaults; logistic regression L2 C=1 on standardised inputs",
            "splits": args.splits, "results": results})


if __name__ == "__main__":
    main()
