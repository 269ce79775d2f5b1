"""Deep GP classifiers against the one-layer GP: Bui et al. (2016), App. A.2, Tables 1 and 2 — binary (GP D-1,
DGP D-1-1, D-2-1, D-3-1 on breast cancer, crabs, ionosphere, pima and sonar, with pep's ``DeepGPClassifier``)
and multi-class (GP D-K, DGP D-1-K, D-2-K, D-3-K on wine and glass, with ``MultiClassDeepGPClassifier``).

Protocol: ``--splits`` random stratified 90/10 splits per data set (seed 1; the estimator standardises the
inputs with the training rows), ``M`` inducing inputs per GP, full-batch Adam for ``--steps`` steps at the
deep GPs' learning rate 0.01, no early stop (the deep GPs' defaults, Bui et al. 2016, §8.1). The GP is
the same estimator without a hidden layer (``hidden_dims=()``; multi-class: the GP of Villacampa-Calvo &
Hernández-Lobato (2017) with its tied factors trained by Adam, as ``multiclass-direct``), "DGP D-h-·" one
hidden layer of width ``h``; every model is fitted on the same splits, so the differences are paired.
The paper does not state its classification splits or ``M``, and its multi-class runs used a Monte Carlo
softmax (App. F) where pep uses Villacampa-Calvo & Hernández-Lobato's probit-difference factors, so only
the relative claims (does a DGP beat the GP?) are comparable, not the numbers.

Usage:  OPENBLAS_NUM_THREADS=1 taskset -c 0 .venv/bin/python -m benchmarks.bench_dgp_multiclass \\
            [--datasets wine glass] [--splits 10] [--steps 1000] [--inducing 20]
        .venv/bin/python -m benchmarks.bench_dgp_multiclass --table   # the table of the committed run
Writes: benchmarks/results/bench_dgp_multiclass.json (``--name``), after every split (``--continue`` resumes).
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from sklearn.metrics import log_loss
from sklearn.model_selection import StratifiedShuffleSplit

from benchmarks._common import RESULTS, Stopwatch, arguments, standard_error, two_se_sign, write_results
from benchmarks.datasets import load
from pep_gp import DeepGPClassifier, MultiClassDeepGPClassifier

MODELS = {"gp": (), "dgp1": (1,), "dgp2": (2,), "dgp3": (3,)}
PAPER = {  # Bui et al. 2016, App. A.2, Tables 2 (multi-class) and 1 (binary): test log-likelihood (nats) ± s.e.
    "glass": {"gp": (-0.79, 0.02), "dgp1": (-0.71, 0.02), "dgp2": (-0.72, 0.02), "dgp3": (-0.71, 0.02)},
    "wine": {"gp": (-0.10, 0.01), "dgp1": (-0.07, 0.01), "dgp2": (-0.07, 0.01), "dgp3": (-0.07, 0.01)},
    "breast-cancer": {"gp": (-0.05, 0.01), "dgp1": (-0.04, 0.01), "dgp2": (-0.04, 0.01), "dgp3": (-0.04, 0.01)},
    "crabs": {"gp": (-0.03, 0.01), "dgp1": (-0.10, 0.05), "dgp2": (-0.03, 0.01), "dgp3": (-0.03, 0.01)},
    "ionosphere": {"gp": (-0.17, 0.02), "dgp1": (-0.17, 0.03), "dgp2": (-0.16, 0.03), "dgp3": (-0.16, 0.02)},
    "pima": {"gp": (-0.40, 0.01), "dgp1": (-0.39, 0.01), "dgp2": (-0.40, 0.02), "dgp3": (-0.39, 0.01)},
    "sonar": {"gp": (-0.32, 0.03), "dgp1": (-0.29, 0.03), "dgp2": (-0.30, 0.03), "dgp3": (-0.31, 0.03)},
}
BINARY = ("breast-cancer", "crabs", "ionosphere", "pima", "sonar")  # Table 1; the others are Table 2's
NAME = "bench_dgp_multiclass"


def label(model: str, dataset: str) -> str:
    """The paper's name of a model: ``GP D-K``, ``DGP D-2-K``; ``K`` is 1 on a binary set."""
    out = "K" if dataset not in BINARY else "1"
    return "GP D-" + out if model == "gp" else f"DGP D-{MODELS[model][0]}-{out}"


def fit_one(x, y, train, test, model, args) -> dict:
    settings = dict(hidden_dims=MODELS[model], num_inducing=min(args.inducing, train.size), max_iter=args.steps,
                    tol=0, learning_rate=args.learning_rate, seed=args.seed)
    binary = np.unique(y).size == 2
    clf = DeepGPClassifier(**settings) if binary else MultiClassDeepGPClassifier(**settings, class_noise=args.class_noise)
    with Stopwatch() as timer:
        clf.fit(x[train], y[train])
    seconds = timer.seconds
    proba = clf.predict_proba(x[test])
    return {"test_loglik": -float(log_loss(y[test], proba, labels=clf.classes_)),
            "test_error": float(np.mean(clf.classes_[np.argmax(proba, axis=1)] != y[test])),
            "seconds": seconds, "steps": int(clf.n_iter_), "rejected_steps": int(clf.n_rejected_steps_)}


def summarise(runs: dict) -> dict:
    """Per data set and model: mean ± standard error over the splits, and the paired difference to the GP."""
    summary = {}
    for dataset, per_model in runs.items():
        gp = [r["test_loglik"] for r in per_model.get("gp", [])]
        summary[dataset] = {}
        for model, records in per_model.items():
            loglik = [r["test_loglik"] for r in records]
            row = {"splits": len(records), "test_loglik": float(np.mean(loglik)), "test_loglik_se": standard_error(loglik),
                   "test_error": float(np.mean([r["test_error"] for r in records])),
                   "test_error_se": standard_error([r["test_error"] for r in records]),
                   "median_seconds": float(np.median([r["seconds"] for r in records]))}
            paired = min(len(gp), len(loglik))
            if model != "gp" and paired:
                diff = np.asarray(loglik[:paired]) - np.asarray(gp[:paired])
                row |= {"minus_gp": float(diff.mean()), "minus_gp_se": standard_error(diff) if paired > 1 else None}
            summary[dataset][model] = row
    return summary


def _pm(mean: float, se: float | None, sign: str = "") -> str:
    """``mean ± se`` (a single split has no standard error: its JSON holds null)."""
    return f"{mean:{sign}.3f} ± {se:.3f}" if se is not None else f"{mean:{sign}.3f}"


def verdict(row: dict) -> str:
    """The paired difference to the GP read at two standard errors."""
    if row["minus_gp_se"] is None:
        return "one split"
    return {1: "beats the GP", -1: "worse than the GP", 0: "no better than the GP (within 2 s.e.)"}[
        two_se_sign(row["minus_gp"], row["minus_gp_se"])]


def table(result: dict) -> str:
    """Markdown: pep's test log-likelihood, error and the paired difference to its GP beside the paper's."""
    rows = ["| data | model | pep test log-lik. | pep − GP (paired) | pep test error | s / fit | splits | paper (Bui et al. 2016, Tables 1–2) |",
            "|---|---|---|---|---|---|---|---|"]
    for dataset, per_model in result["summary"].items():
        for model, row in per_model.items():
            paper = PAPER[dataset][model]
            if model == "gp":
                versus = "–"
            else:
                versus = f"{_pm(row['minus_gp'], row['minus_gp_se'], '+')}: {verdict(row)}"
            rows.append(f"| {dataset} | {label(model, dataset)} | {_pm(row['test_loglik'], row['test_loglik_se'])} | {versus} "
                        f"| {_pm(row['test_error'], row['test_error_se'])} | {row['median_seconds']:.1f} "
                        f"| {row['splits']} | {paper[0]:.2f} ± {paper[1]:.2f} |")
    return "\n".join(rows)


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.bench_dgp_multiclass``."""
    parser = arguments(__doc__, splits=10, steps=1000, name=NAME)
    parser.add_argument("--datasets", nargs="+", default=["wine", "glass"], choices=sorted(PAPER))
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--inducing", type=int, default=20)
    parser.add_argument("--learning-rate", type=float, default=0.01)
    parser.add_argument("--class-noise", type=float, default=1.0, help="the starting latent noise σ_0,c (multi-class only)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--continue", dest="resume", action="store_true", help="keep the splits already in --name")
    parser.add_argument("--table", action="store_true", help="print the table of the committed --name and exit")
    return parser


def main(argv=None) -> None:
    args = cli().parse_args(argv)
    path = RESULTS / f"{args.name}.json"
    if args.table:
        print(table(json.loads(path.read_text())))
        return
    runs = json.loads(path.read_text())["runs"] if args.resume and path.exists() else {}
    protocol = {"splits": args.splits, "test_size": 0.1, "split_seed": 1, "steps": args.steps, "batch_size": "all rows",
                "inducing": args.inducing, "learning_rate": args.learning_rate, "seed": args.seed,
                "class_noise": args.class_noise,
                "models": {m: list(MODELS[m]) for m in args.models}}
    for dataset in args.datasets:
        data = load(dataset)
        splits = list(StratifiedShuffleSplit(args.splits, test_size=0.1, random_state=1).split(data.x, data.y))
        for index, (train, test) in enumerate(splits):
            for model in args.models:
                records = runs.setdefault(dataset, {}).setdefault(model, [])
                if len(records) > index:
                    continue
                records.append({"split": index, **fit_one(data.x, data.y, train, test, model, args)})
                print(dataset, index, model, records[-1], flush=True)
            write_results(args.name, {"protocol": protocol, "summary": summarise(runs), "runs": runs})
    result = json.loads(path.read_text())
    print(table(result))


if __name__ == "__main__":
    main()
