"""Matérn 5/2 beside the squared exponential on real tables (issue 38): pep's Power-EP sparse GPs
(``SparseGPRegressor`` on :data:`REGRESSION`, ``SparseGPClassifier`` on :data:`CLASSIFICATION`, their defaults but
``kernel``: M = 50, α = 0.5, one lengthscale shared by the standardised inputs) and scikit-learn's exact GP with the
same kernel as a third column (``GaussianProcessRegressor`` with ``C·k + White`` and ``normalize_y``;
``GaussianProcessClassifier``, Laplace with a logistic link where pep's classifier is probit; one lengthscale;
L-BFGS-B from scikit-learn's defaults, no restarts) where the training rows are at most :data:`EXACT_ROWS`.

Per set, ``--splits`` random 90/10 splits (stratified for classification; seed 0), the sets read by
:mod:`benchmarks.datasets`. Reported: test NLL (regression: per point, in the target's units; classification:
``−log p(y|x)``), mean ± standard error over the splits, the paired pep Matérn 5/2 − SE difference, and seconds
per fit (median over the splits) measured in the same run. pep's times exclude compilation: before its first
split, each set and kernel is fitted once for 2 steps (that warm-up's seconds, compilation included, are
recorded as ``compile_seconds``), and every pep fit has seed 0 (the splits differ; a new seed compiles the
step again, about 4 s on boston); scikit-learn compiles nothing.

    OPENBLAS_NUM_THREADS=1 nice -n 10 python -m benchmarks.bench_kernels --splits 3

writes ``benchmarks/results/bench_kernels.json``; ``--table`` prints the results page's table from it
(docs/results/kernels.md, ``python -m docs.results``).
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from scipy.stats import norm

from benchmarks import datasets
from benchmarks._common import Stopwatch, arguments, read_results, standard_error, write_results

NAME = "bench_kernels"
REGRESSION = ("boston", "concrete")
CLASSIFICATION = ("ionosphere", "sonar", "pima")
KERNELS = ("se", "matern52")
LABELS = {"se": "SE", "matern52": "Matérn 5/2"}
EXACT_ROWS = 2_000
"""The most training rows scikit-learn's exact GP is run on (O(N³) per optimiser step)."""


def pep_kernel(name: str):
    from pep_gp.kernels import Matern52, SquaredExponential

    return {"se": SquaredExponential, "matern52": Matern52}[name]()


def sklearn_kernel(name: str, regression: bool):
    from sklearn.gaussian_process import kernels as sk

    shape = sk.RBF(1.0) if name == "se" else sk.Matern(1.0, nu=2.5)
    return sk.ConstantKernel(1.0) * shape + sk.WhiteKernel(0.1) if regression else sk.ConstantKernel(1.0) * shape


def held_out_nll(task: str, y, out) -> float:
    """Mean test NLL: ``out`` is ``(mean, std)`` for regression, class probabilities ``[n, 2]`` otherwise."""
    if task == "regression":
        mean, std = out
        return float(-np.mean(norm.logpdf(y, mean, std)))
    return float(-np.mean(np.log(np.clip(out[np.arange(len(y)), y], 1e-300, 1.0))))


def fit_pep(task: str, kernel: str, x, y, x_test, y_test, max_iter: int | None = None) -> dict:
    from pep_gp import SparseGPClassifier, SparseGPRegressor

    estimator = SparseGPRegressor if task == "regression" else SparseGPClassifier
    extra = {} if max_iter is None else {"max_iter": max_iter, "tol": 0.0}
    with Stopwatch() as timer:
        model = estimator(kernel=pep_kernel(kernel), seed=0, **extra).fit(x, y)
    seconds = timer.seconds
    out = model.predict(x_test, return_std=True) if task == "regression" else model.predict_proba(x_test)
    return {"nll": held_out_nll(task, y_test, out), "seconds": round(seconds, 3), "steps": int(model.n_iter_),
            "kernel": repr(model.kernel_)}


def fit_sklearn(task: str, kernel: str, x, y, x_test, y_test) -> dict:
    from sklearn.gaussian_process import GaussianProcessClassifier, GaussianProcessRegressor

    mean, std = x.mean(0), np.where(x.std(0) > 0, x.std(0), 1.0)
    x, x_test = (x - mean) / std, (x_test - mean) / std
    started = time.perf_counter()
    if task == "regression":
        model = GaussianProcessRegressor(sklearn_kernel(kernel, True), normalize_y=True).fit(x, y)
    else:
        model = GaussianProcessClassifier(sklearn_kernel(kernel, False)).fit(x, y)
    seconds = time.perf_counter() - started
    out = model.predict(x_test, return_std=True) if task == "regression" else model.predict_proba(x_test)
    return {"nll": held_out_nll(task, y_test, out), "seconds": round(seconds, 3), "kernel": str(model.kernel_)}


def run(names: list[str], splits: int, done: dict, save) -> None:
    """Every set's splits (keys ``"set/method/kernel/split"``, method ``pep`` or ``sklearn``), after a warm-up
    fit per set and kernel (keys ``"set/warm-up/kernel"``)."""
    from sklearn.model_selection import ShuffleSplit, StratifiedShuffleSplit

    for name in names:
        ds = datasets.load(name)
        cut = ShuffleSplit if ds.task == "regression" else StratifiedShuffleSplit
        folds = list(cut(splits, test_size=0.1, random_state=0).split(ds.x, ds.y))
        for kernel in KERNELS:
            train, test = folds[0]
            key = f"{name}/warm-up/{kernel}"
            if key not in done:
                warm = fit_pep(ds.task, kernel, ds.x[train], ds.y[train], ds.x[test], ds.y[test], max_iter=2)
                done[key] = {"compile_seconds": warm["seconds"]}
            for split, (train, test) in enumerate(folds):
                data = (ds.x[train], ds.y[train], ds.x[test], ds.y[test])
                methods = {"pep": fit_pep} | ({"sklearn": fit_sklearn} if len(train) <= EXACT_ROWS else {})
                for method, fit in methods.items():
                    key = f"{name}/{method}/{kernel}/{split}"
                    if key in done:
                        continue
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")  # convergence notices of either library
                        done[key] = {"n_train": int(len(train)), **fit(ds.task, kernel, *data)}
                    print(key, done[key], flush=True)
                    save()


def _cell(values) -> str:
    return f"{np.mean(values):.3f} ± {standard_error(values):.3f}"


def _paired(a: list[float], b: list[float]) -> str:
    differences = np.asarray(a) - np.asarray(b)
    se = standard_error(differences)
    return f"{np.mean(differences):+.3f} ({np.mean(differences) / se:+.1f})" if se > 0 else f"{np.mean(differences):+.3f}"


def table(result: dict) -> str:
    """The results page's table of one ``bench_kernels`` JSON: per set and kernel, pep's and scikit-learn's test
    NLL and seconds per fit, and the paired Matérn 5/2 − SE difference of each."""
    runs = result["runs"]
    names = [n for n in REGRESSION + CLASSIFICATION if any(k.startswith(f"{n}/") for k in runs)]
    lines = [result["settings"], "",
             "| set | N train | kernel | pep test NLL | pep s / fit | exact GP test NLL | exact GP s / fit "
             "| pep: Matérn − SE | exact GP: Matérn − SE |", "|---|---|---|---|---|---|---|---|---|"]
    for name in names:
        def rows(method, kernel):
            found = sorted((k for k in runs if k.startswith(f"{name}/{method}/{kernel}/")), key=lambda k: int(k.rsplit("/", 1)[1]))
            return [runs[k] for k in found]

        for kernel in KERNELS:
            cells = []
            for method in ("pep", "sklearn"):
                found = rows(method, kernel)
                cells += ([_cell([r["nll"] for r in found]), f"{np.median([r['seconds'] for r in found]):.2f}"]
                          if found else ["—", "—"])
            differences = []
            for method in ("pep", "sklearn"):
                se_rows, matern_rows = rows(method, "se"), rows(method, "matern52")
                differences.append("" if kernel == "se" else (
                    _paired([r["nll"] for r in matern_rows], [r["nll"] for r in se_rows])
                    if se_rows and len(se_rows) == len(matern_rows) else "—"))
            n_train = rows("pep", kernel)[0]["n_train"]
            lines.append(f"| {name} | {n_train} | {LABELS[kernel]} | {' | '.join(cells)} | {' | '.join(differences)} |")
    return "\n".join(lines)


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.bench_kernels``."""
    parser = arguments(__doc__)
    parser.add_argument("--splits", type=int, default=3, help="random 90/10 splits per set")
    parser.add_argument("--datasets", nargs="+", default=list(REGRESSION + CLASSIFICATION),
                        choices=REGRESSION + CLASSIFICATION)
    parser.add_argument("--table", action="store_true", help="print the results page's table of the committed JSON")
    return parser


def main() -> None:
    args = cli().parse_args()
    old = read_results(NAME)
    if args.table:
        print(table(old))
        return
    result = {"settings": (f"{args.splits} random 90/10 splits per set (stratified for classification), seed 0; "
                           "mean ± standard error over the splits, lower is better; in brackets a paired "
                           "difference in its standard errors; seconds per fit: the median over the splits, "
                           "pep's after a warm-up fit that compiled its programs"),
              "runs": old.get("runs", {})}
    started = time.perf_counter()

    def save():
        result["wall_seconds"] = round(time.perf_counter() - started, 1)
        write_results(NAME, result)

    run(args.datasets, args.splits, result["runs"], save)
    save()


if __name__ == "__main__":
    main()
