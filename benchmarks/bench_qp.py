"""Zhang et al. 2020 (Quantile Propagation) Table 1 on data available offline: EP against QP with untied sites on
the exact GP, hyper-parameters by the EP evidence (the exact-GP training path,
:mod:`pep_gp.pipeline.training.exact_ep`, behind ``ExactGPClassifier(projection=…)``).

Classification (:data:`SETS`, read by :mod:`benchmarks.datasets`): Table 1's sets — mlbench Ionosphere
(351 × 34), BreastCancer (the 683 complete rows × 9, the paper's set; the committed run before issue 40
used scikit-learn's WDBC, 569 × 30, under the same name), Sonar (208 × 60), Glass as window (types 1–3)
against non-window glass (5–7; the paper names no classes; glass-id: with UCI's Id column as an input),
MASS Pima (``Pima.tr`` + ``Pima.te``, 532 × 7, Kuss & Rasmussen's set), MASS crabs (sex from species,
index, FL, RW, CL, CW, BD; 200 × 7), wine1–3 (the paper's class pairs 1–2, 1–3, 2–3), and wine1-vs-rest
(class 1 against the rest, 178 × 13, the committed run's). Protocol
(the protocol of Zhang et al. 2020, Table 1): 10-fold cross-validation repeated ``--repeats`` times (folds by ``KFold(10, shuffle=True,
random_state=repeat)``; the paper: 100 repeats), features standardised on the training folds; EP first, QP
started from EP's hyper-parameters (the authors' code). Every data set's repeat k runs before any repeat
k + 1, and ``--start-repeats-within MINUTES`` starts no repeat after that time (``repeats_done`` in the
JSON); ``--continue`` keeps the finished repeats of ``--out`` and runs the next ones. Reported per data
set: mean test error and NLL per method, the mean paired difference QP − EP with its standard error over
the folds, plain and corrected for the training rows the folds share (:func:`corrected_standard_error`),
and over several repeats the mean ± std of the repeats' averages (the paper's format).

Poisson (Zhang et al. 2020, App. C.2, App. H): coal-mining disasters (``boot``/``coal``, 191 events in 112 yearly counts
1851–1962), square link, constant prior mean 1 (the authors' code), each year in the test set with
probability ½ (split k: ``default_rng(k)``), ``--poisson-repeats`` splits (the paper: 200); QP starts from
EP's hyper-parameters and sites; the count predicted is the mode of the negative binomial predictive
(eq. 122); mean absolute count error (the paper: 1.186 ± 0.270 for EP and QP) and NLL.
``--poisson-start gpy`` starts L-BFGS-B from the authors' ``GPy.kern.RBF(1)`` defaults on the raw year.

    OPENBLAS_NUM_THREADS=1 nice -n 10 .venv/bin/python -m benchmarks.bench_qp --repeats 10 --poisson-repeats 0 --start-repeats-within 30
    OPENBLAS_NUM_THREADS=1 nice -n 10 .venv/bin/python -m benchmarks.bench_qp --repeats 0 --poisson-repeats 200 --datasets --out benchmarks/results/bench_qp_coal.json

write ``benchmarks/results/bench_qp.json`` and ``bench_qp_coal.json``; ``--summarise [--out FILE]``
recomputes a file's summaries from its stored folds and prints the results page's table (``OPENBLAS_NUM_THREADS=1``: on a
busy machine OpenBLAS's threads made each linear solve 10–100 times slower).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
from scipy.stats import nbinom, norm
from sklearn.model_selection import KFold

from benchmarks import datasets
from benchmarks.datasets import coal_counts
from benchmarks._common import arguments, two_se_sign, write_json
import pep_gp.core
from pep_gp.core.likelihoods import PoissonSquare, Probit
from pep_gp.core.models.ep import EP, site_data
from pep_gp.pipeline.training import exact_ep

RESULTS = Path(__file__).parent / "results" / "bench_qp.json"


SETS = {  # the benchmark's name → benchmarks.datasets.load's arguments
    "ionosphere": ("ionosphere", {}), "breast-cancer": ("breast-cancer", {}), "pima": ("pima", {"version": "mass"}),
    "crabs": ("crabs", {"target": "sex"}), "sonar": ("sonar", {}),
    "glass": ("glass", {"classes": (("1", "2", "3"), ("5", "6", "7"))}),
    "glass-id": ("glass", {"classes": (("1", "2", "3"), ("5", "6", "7")), "id_column": True}),
    "wine1": ("wine", {"classes": ("1", "2")}), "wine2": ("wine", {"classes": ("1", "3")}),
    "wine3": ("wine", {"classes": ("2", "3")}), "wine1-vs-rest": ("wine", {"classes": (("2", "3"), "1")}),
}


def load(name):
    """Inputs float64 [N, D] and labels 0/1 of the benchmark's set ``name`` (:data:`SETS`)."""
    dataset, options = SETS[name]
    ds = datasets.load(dataset, **options)
    return ds.x, ds.y


def classification(name, repeat, max_iter, rows, save):
    """One repeat of 10-fold CV on ``name`` (folds by ``KFold(shuffle=True, random_state=repeat)``), appended to ``rows``."""
    x, y = load(name)
    for fold, (train, test) in enumerate(KFold(10, shuffle=True, random_state=repeat).split(x)):
        started = time.time()
        mean, std = x[train].mean(axis=0), x[train].std(axis=0)
        std = np.where(std > 0, std, 1.0)
        x_train, x_test = (x[train] - mean) / std, (x[test] - mean) / std
        with pep_gp.core.float64():
            data = site_data(np.arange(len(train)), y[train])
        row, start = {"repeat": repeat, "fold": fold}, None
        for method, projection in [("ep", "kl"), ("qp", "wasserstein")]:
            fitted = exact_ep.fit(EP(Probit(), projection, 1.0, damping=0.5, schedule="parallel"), x_train, data, start,
                                  max_iter=max_iter)
            start = fitted.log_theta  # QP starts from EP's hyper-parameters (the authors' code)
            with pep_gp.core.float64():
                latent_mean, latent_var = exact_ep.predict(fitted.kernel, fitted.sites, x_train, data, x_test)
            p_one = norm.cdf(np.asarray(latent_mean) / np.sqrt(1.0 + np.asarray(latent_var)))
            prob = np.clip(np.where(y[test] == 1, p_one, 1.0 - p_one), 1e-300, 1)
            row[method] = {"nll": float(-np.mean(np.log(prob))), "error": float(np.mean(prob < 0.5)),
                           "log_evidence": fitted.log_evidence, "unconverged_evaluations": fitted.unconverged}
        row["seconds"] = time.time() - started
        rows.append(row)
        print(name, repeat, fold, row["ep"], row["qp"], f"{row['seconds']:.1f}s", flush=True)
        save({"rows": x.shape[0], "features": x.shape[1], "folds": rows, "summary": summarise(rows, ["nll", "error"])})


def corrected_standard_error(differences, folds: int) -> float:
    """Standard error of the mean of paired differences over the folds of repeated ``folds``-fold CV,
    corrected for the training sets the folds share: ``√((1/J + n_test/n_train)·s²)`` with ``J`` folds in
    all and ``n_test/n_train = 1/(folds − 1)`` (Nadeau & Bengio 2003, "Inference for the generalization
    error", the corrected resampled t-test; Bouckaert & Frank 2004 for repeated k-fold CV). The plain
    ``s/√J`` treats the J folds as independent, which they are not, and rejects far too often."""
    differences = np.asarray(differences, dtype=float)
    return float(np.sqrt((1.0 / differences.size + 1.0 / (folds - 1)) * differences.var(ddof=1)))


def summarise(rows, metrics):
    """Per metric: the means (and standard deviations over the folds or splits) per method, the mean paired
    difference QP − EP with its standard error over the folds (or splits) — for CV folds also the corrected
    one (:func:`corrected_standard_error`) —, the fraction where QP is lower, and (several repeats) the mean
    ± std over the repeats' averages, the paper's format."""
    out = {}
    folds = 1 + max(r.get("fold", 0) for r in rows)
    for metric in metrics:
        ep = np.array([r["ep"][metric] for r in rows])
        qp = np.array([r["qp"][metric] for r in rows])
        diff = qp - ep
        out[metric] = {"ep": float(ep.mean()), "qp": float(qp.mean()), "qp_minus_ep": float(diff.mean()),
                       "qp_minus_ep_se": float(diff.std(ddof=1) / np.sqrt(len(diff))) if len(diff) > 1 else None,
                       "qp_minus_ep_se_corrected": corrected_standard_error(diff, folds) if folds > 1 else None,
                       "qp_better_fraction": float(np.mean(diff < 0)),
                       "ep_std": float(ep.std(ddof=1)) if len(ep) > 1 else None,
                       "qp_std": float(qp.std(ddof=1)) if len(qp) > 1 else None}
        repeats = sorted({r["repeat"] for r in rows})
        if len(repeats) > 1 and "fold" in rows[0]:
            means = np.array([[np.mean([r[m][metric] for r in rows if r["repeat"] == k]) for m in ("ep", "qp")]
                              for k in repeats])
            out[metric]["over_repeats"] = {"repeats": len(repeats), "ep_mean": float(means[:, 0].mean()),
                                           "ep_std": float(means[:, 0].std(ddof=1)), "qp_mean": float(means[:, 1].mean()),
                                           "qp_std": float(means[:, 1].std(ddof=1))}
    return out


PAPER = {  # Zhang et al. 2020 Table 1: test error % (EP's and QP's are equal there but for Glass: EP's), test NLL of
    # EP and QP (the table's ×10³), and how the paper's data set differs
    "ionosphere": (7.9, (0.2159, 0.2159), ""),
    "breast-cancer": (3.2, (0.0882, 0.0882), " (683 × 9 set)"),
    "pima": (20.3, (0.4247, 0.4240), " (732 rows)"),
    "crabs": (2.7, (0.0644, 0.0643), ""),
    "sonar": (14.0, (0.3067, 0.3062), ""),
    "glass": (1.1, (0.0295, 0.0290), " (214 × 10; classes not stated)"),
    "glass-id": (1.1, (0.0295, 0.0290), " (214 × 10; classes not stated)"),
    "wine1": (1.5, (0.0480, 0.0474), ""),
    "wine2": (0.0, (0.0180, 0.0178), ""),
    "wine3": (2.0, (0.0521, 0.0518), ""),
    "wine1-vs-rest": (1.5, (0.0480, 0.0474), " (class 1 vs 2, 130 rows)"),
}


def table(result: dict) -> str:
    """The results page's table of the classification results of one ``bench_qp`` JSON (a test checks that
    docs/results/qp.md holds it): per data set the folds, test error and NLL of EP and QP, the paired NLL difference
    with its plain and corrected standard errors, the fraction of folds where QP is lower, the paper's NLL and
    pep's difference to it (:func:`versus_paper`)."""
    lines = ["| data (rows × features) | folds | test error % EP / QP | test NLL EP / QP | NLL QP − EP ± s.e. "
             "| corrected s.e. (difference in it) | QP lower | paper NLL EP / QP | pep − paper NLL, EP / QP (in s.e.) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, data in result["classification"].items():
        nll, error = data["summary"]["nll"], data["summary"]["error"]
        paper_error, (paper_ep, paper_qp), note = PAPER[name]
        corrected = nll["qp_minus_ep_se_corrected"]
        lines.append(f"| {name} ({data['rows']} × {data['features']}) | {len(data['folds'])} "
                     f"| {100 * error['ep']:.2f} / {100 * error['qp']:.2f} (paper {paper_error}) "
                     f"| {nll['ep']:.4f} / {nll['qp']:.4f} | {nll['qp_minus_ep']:+.1e} ± {nll['qp_minus_ep_se']:.1e} "
                     f"| {corrected:.1e} ({nll['qp_minus_ep'] / corrected:+.2f}) | {nll['qp_better_fraction']:.0%} "
                     f"| {paper_ep:.4f} / {paper_qp:.4f}{note} | {versus_paper(nll, paper_ep, paper_qp)} |")
    return "\n".join(lines)


def versus_paper(nll: dict, paper_ep: float, paper_qp: float) -> str:
    """pep's mean test NLL minus the paper's, for EP and QP, each in standard errors of pep's mean over the
    repeats (their averages' standard deviation / √repeats: the spread of the partitions, as the paper's ±),
    marked † beyond two; a dash for a single repeat."""
    repeats = nll.get("over_repeats")
    if repeats is None:
        return "–"
    cells = []
    for method, paper in (("ep", paper_ep), ("qp", paper_qp)):
        difference = repeats[f"{method}_mean"] - paper
        se = repeats[f"{method}_std"] / np.sqrt(repeats["repeats"])
        cells.append(f"{difference:+.4f} ({difference / se:+.1f}{' †' if two_se_sign(difference, se) else ''})")
    return " / ".join(cells)


def resummarise(path: Path) -> None:
    """Recompute the summaries of the folds and splits stored in ``path`` (after a change to
    :func:`summarise`; nothing is re-run) and print the results page's table."""
    result = json.loads(path.read_text())
    for data in result.get("classification", {}).values():
        data["summary"] = summarise(data["folds"], ["nll", "error"])
    if "coal" in result:
        result["coal"]["summary"] = summarise(result["coal"]["splits"], ["abs_error", "nll"])
    path.write_text(json.dumps(result, indent=1))
    if result.get("classification"):
        print(table(result))


def poisson(repeats, max_iter, save, start="median"):
    """``start``: the hyper-parameters L-BFGS-B starts from — ``"median"`` (median distance, variance 1) or
    ``"gpy"`` (the authors' ``GPy.kern.RBF(1)`` defaults on the raw year: lengthscale 1 year, variance 1)."""
    year, counts = coal_counts()
    x = ((year - year.mean()) / year.std())[:, None]
    first = None if start == "median" else np.array([np.log(1.0 / year.std()), 0.0])
    rows = []
    for repeat in range(repeats):
        test = np.random.default_rng(repeat).random(len(year)) > 0.5
        train = ~test
        with pep_gp.core.float64():
            data = site_data(np.arange(train.sum()), counts[train], prior_mean=np.ones(train.sum()))
        row = {"repeat": repeat}
        fitted = None
        for method, projection in [("ep", "kl"), ("qp", "wasserstein")]:
            begin = (first, None) if fitted is None else (fitted.log_theta, fitted.sites)
            fitted = exact_ep.fit(EP(PoissonSquare(), projection), x[train], data, *begin, max_iter=max_iter)
            with pep_gp.core.float64():
                mean, var = (np.asarray(a) for a in exact_ep.predict(fitted.kernel, fitted.sites, x[train], data,
                                                                      x[test]))
            shape, scale = PoissonSquare.predict(mean + 1.0, var)  # + the prior mean
            mode = np.where(shape > 1, np.floor(scale * (shape - 1)), 0.0)
            log_p = nbinom.logpmf(counts[test], shape, 1.0 / (1.0 + scale))
            row[method] = {"abs_error": float(np.mean(np.abs(mode - counts[test]))), "nll": float(-np.mean(log_p)),
                           "log_evidence": fitted.log_evidence, "unconverged_evaluations": fitted.unconverged}
        rows.append(row)
        print("coal", repeat, row["ep"], row["qp"], flush=True)
        save({"years": len(year), "events": int(counts.sum()), "start": start, "splits": rows, "summary": summarise(rows, ["abs_error", "nll"])})


def finished(path, command):
    """The results in ``path`` if the same ``command`` (but for ``--start-repeats-within``) wrote them."""
    old = json.loads(path.read_text())
    if old["command"].split(" --start-repeats-within")[0] != command.split(" --start-repeats-within")[0]:
        raise ValueError(f"--continue: {path} was written by {old['command']!r}, not by {command!r}")
    return old


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.bench_qp``."""
    parser = arguments(__doc__)
    parser.add_argument("--repeats", type=int, default=10, help="repeats of 10-fold CV (paper: 10)")
    parser.add_argument("--poisson-repeats", type=int, default=200, help="random halvings of the coal data (paper: 200)")
    parser.add_argument("--datasets", nargs="*", default=[name for name in SETS if name not in ("wine1-vs-rest", "glass-id")],
                        choices=list(SETS))
    parser.add_argument("--poisson-start", choices=["median", "gpy"], default="median",
                        help="coal: start L-BFGS-B from the median distance or from GPy's RBF defaults (1 year, 1)")
    parser.add_argument("--start-repeats-within", type=float, default=None, metavar="MINUTES",
                        help="start no repeat of the CV after this many minutes (the JSON's repeats_done says how many ran)")
    parser.add_argument("--max-iter", type=int, default=50, help="L-BFGS-B iterations per fit")
    parser.add_argument("--continue", dest="resume", action="store_true",
                        help="keep the finished repeats of the CV in --out (same data sets and settings) and run the rest")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--summarise", action="store_true",
                        help="recompute the summaries of the results stored in --out, print the results page's table, run nothing")
    return parser


def main():
    args = cli().parse_args()
    if args.summarise:
        resummarise(args.out)
        return
    started = time.time()
    args.out.parent.mkdir(parents=True, exist_ok=True)

    def saver(*keys):
        """Write the results so far after every fold or split (an interrupted run keeps what it finished)."""
        def save(value):
            target = result
            for key in keys[:-1]:
                target = target[key]
            target[keys[-1]] = value
            result["seconds"] = time.time() - started
            write_json(args.out, result, echo=False)
        return save

    options = [f"--repeats {args.repeats}", f"--poisson-repeats {args.poisson_repeats}",
               f"--poisson-start {args.poisson_start}", "--datasets", *args.datasets, f"--max-iter {args.max_iter}"]
    if args.start_repeats_within is not None:
        options.append(f"--start-repeats-within {args.start_repeats_within:g}")
    if args.resume:
        options.append("--continue")
    if args.out != RESULTS:
        options.append(f"--out {args.out}")
    result = {"command": "python -m benchmarks.bench_qp " + " ".join(options),
              "openblas_num_threads": os.environ.get("OPENBLAS_NUM_THREADS"), "classification": {}}
    if args.poisson_repeats > 0:
        poisson(args.poisson_repeats, args.max_iter, saver("coal"), args.poisson_start)
    rows = {name: [] for name in args.datasets}
    first = 0
    if args.resume:  # the folds of the finished repeats stay; a repeat cut short runs again
        old = finished(args.out, result["command"])
        first = old["repeats_done"]
        for name in args.datasets:
            if (old["classification"][name]["rows"], old["classification"][name]["features"]) != load(name)[0].shape:
                raise ValueError(f"--continue: {args.out}'s {name} has {old['classification'][name]['rows']} rows × "
                                 f"{old['classification'][name]['features']} features, the set now {load(name)[0].shape}")
        rows = {name: [row for row in old["classification"][name]["folds"] if row["repeat"] < first] for name in args.datasets}
        result.update(classification=old["classification"], repeats_done=first,
                      seconds_before=old["seconds"] + old.get("seconds_before", 0.0))
    for repeat in range(first, args.repeats):  # every data set's repeat k before any repeat k + 1
        if args.start_repeats_within is not None and time.time() - started > 60 * args.start_repeats_within:
            break
        for name in args.datasets:
            classification(name, repeat, args.max_iter, rows[name], saver("classification", name))
        saver("repeats_done")(repeat + 1)


if __name__ == "__main__":
    main()
