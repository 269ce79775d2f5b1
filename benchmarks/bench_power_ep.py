"""Bui, Yan & Turner (2017), §4.1–§4.3: how the Power-EP power α changes sparse GP regression and
classification, from the VFE limit (α = 0) to EP (α = 1).

§4.1, synthetic regression (``--synthetic``): ``--draws`` data sets of 1000 points, 5-D inputs ``x ~ N(0, I)``,
targets from a GP with an ARD squared exponential kernel (per draw: lengthscales log-uniform in [0.5, 2],
variance 1, noise variance 0.01; the paper does not state its values) split 500/500. Per draw, ``M`` and
α: the collapsed PEP-α energy (Bui, Yan & Turner 2017, eq. 128; :func:`pep_gp.core.models.collapsed_regression.
log_marginal_likelihood`) minimised by L-BFGS-B with at most ``--max-fun`` evaluations in all (the paper:
L-BFGS, 2000): the hyper-parameters alone (≤ 200, from lengthscales at the inputs' median distance, the
targets' variance and a tenth of it as noise — from a hundredth, α = 0.5 at M = 20 fell into the all-noise
optimum on draw 0 —, the pseudo-inputs at random training inputs), then with the pseudo-inputs; and
the full GP (pseudo-inputs fixed at the training inputs, exact for every α). Reported: the standardised mean
squared error (SMSE) and standardised mean log loss (SMLL, against the training targets' Gaussian;
Rasmussen & Williams 2006, §2.5) on the test half and the approximate negative log marginal likelihood per
training point (NLML / N), mean ± standard error over the draws.

§4.2, real regression sets (``--regression``): §4.1's fits (:func:`fit_collapsed`, the same starts and budget)
on the sets of :data:`REGRESSION` (the two of the paper's eight UCI sets available offline), ``--splits``
random 90/10 splits (seed = split; the paper: 20), inputs and targets standardised on the training split,
each M of ``--ms`` (default 10 and 50; the paper: 5–200, its grid not given) and α, and the full GP.
Reported as §4.1, mean ± standard error over the splits, and the paper's pairwise comparisons (its Fig. 4):
in what fraction of the (set, split, M) experiments α = 0.5 beats VFE and EP on SMSE, EP beats VFE and
α = 0.5 on SMLL, and so on, beside the paper's fractions over its eight sets.

§4.3, classification (``--classification``): ``SparseGPClassifier`` (probit, tied Power-EP factor, Adam; the
estimator's defaults but ``num_inducing`` and ``alpha``) on the sets of :data:`CLASSIFICATION` read by
:mod:`benchmarks.datasets`, ``--splits`` random 90/10 splits (stratified, seed = split; the paper: 20),
features standardised on the training split. Reported: test error and NLL, mean ± standard error over the
splits, and the mean paired difference from α = 0.5 (the estimators' default) in its standard errors.

The paper gives §4.1 and §4.3 as plots only (its Figs. 3, 6, 7, 11, 12 and 24–27), so no number of the
paper stands beside pep's there; its statements are quoted on the results page. §4.2's win fractions are
the paper's only numbers (its text beside Fig. 4) and stand beside pep's.

    OPENBLAS_NUM_THREADS=1 nice -n 10 python -m benchmarks.bench_power_ep --synthetic --draws 10 --ms 5 20 50 100
    OPENBLAS_NUM_THREADS=1 nice -n 10 python -m benchmarks.bench_power_ep --regression --splits 20 --ms 10 50
    OPENBLAS_NUM_THREADS=1 nice -n 10 python -m benchmarks.bench_power_ep --classification --splits 5 --ms 20

write (and, run again, extend) ``benchmarks/results/bench_power_ep.json``; ``--table`` prints the results
page's tables from it.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy import optimize
from scipy.stats import norm, rankdata

from benchmarks import datasets
from benchmarks._common import arguments, read_results, standard_error, write_results

ALPHAS = (0.0, 0.1, 0.2, 0.5, 0.8, 1.0)
CLASSIFICATION = ("breast-cancer", "crabs", "ionosphere", "pima", "sonar")
REGRESSION = ("boston", "concrete")  # of the paper's eight §4.2 sets, the two available offline
NAME = "bench_power_ep"
INPUTS, ROWS, TRAIN = 5, 1000, 500


# --- §4.1: synthetic regression ----------------------------------------------------------------------------

def draw(seed: int) -> dict:
    """One synthetic data set: ``x ~ N(0, I₅)``, ``y ~ N(0, K + σ²I)`` with ARD lengthscales log-uniform in
    [0.5, 2], variance 1, σ² = 0.01; the first 500 rows train, the rest test."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((ROWS, INPUTS))
    lengthscales = np.exp(rng.uniform(np.log(0.5), np.log(2.0), INPUTS))
    scaled = x / lengthscales
    sq = np.sum(scaled**2, 1)
    k = np.exp(-0.5 * np.maximum(sq[:, None] + sq[None] - 2 * scaled @ scaled.T, 0.0))
    y = np.linalg.cholesky(k + 0.01 * np.eye(ROWS)) @ rng.standard_normal(ROWS)
    return {"x": x[:TRAIN], "y": y[:TRAIN], "x_test": x[TRAIN:], "y_test": y[TRAIN:], "lengthscales": lengthscales}


def _kernel(log_lengthscales, log_variance):
    import jax.numpy as jnp

    from pep_gp.core.kernels import SquaredExponential
    from pep_gp.core.parameters import Positive

    return SquaredExponential().replace(lengthscales=Positive(log_lengthscales[None]),
                                        variance=Positive(jnp.reshape(log_variance, (1,))))


def fit_collapsed(data: dict, m: int | None, alpha: float, max_fun: int, seed: int) -> dict:
    """Minimise ``−log Z_PEP(α)`` (eq. 128) by L-BFGS-B over log lengthscales, log variance, log noise and (``m``
    given) the pseudo-inputs; ``m = None``: the full GP (pseudo-inputs = the training inputs, fixed)."""
    import jax
    import jax.numpy as jnp

    from pep_gp.core import float64
    from pep_gp.core.models.collapsed_regression import log_marginal_likelihood, predict_f

    x, y = data["x"], data["y"]
    d = x.shape[1]
    rng = np.random.default_rng(seed)
    z0 = x if m is None else x[rng.choice(len(x), m, replace=False)]
    median = np.median(np.linalg.norm(x[:, None] - x[None], axis=-1))  # lengthscales start at the median distance
    start = np.concatenate([np.full(d, np.log(median)), [np.log(np.var(y)), np.log(np.var(y) / 10)],
                            [] if m is None else z0.ravel()])

    def unpack(theta, z_fixed=False):
        z = jnp.asarray(z0) if m is None or z_fixed else theta[d + 2:].reshape(m, d)
        return _kernel(theta[:d], theta[d]), jnp.exp(theta[d + 1]), z

    power = 1.0 if m is None else alpha
    with float64():
        def objective(theta, z_fixed):
            kernel, noise, z = unpack(theta, z_fixed)
            return -log_marginal_likelihood(kernel, z, noise, jnp.asarray(x), jnp.asarray(y), power) / len(y)

        def minimise(theta, z_fixed, evaluations):
            value_and_grad = jax.jit(jax.value_and_grad(lambda t: objective(t, z_fixed)))
            return optimize.minimize(lambda t: tuple(np.asarray(v, float) for v in value_and_grad(jnp.asarray(t))),
                                     theta, jac=True, method="L-BFGS-B",
                                     options={"maxfun": evaluations, "maxiter": evaluations})

        started = time.perf_counter()
        # The hyper-parameters first, the pseudo-inputs held at their start (jointly from the start, L-BFGS-B's
        # first steps can shrink every lengthscale into the all-noise optimum), then everything jointly.
        first = minimise(start[:d + 2], True, min(200, max_fun))
        fitted = first if m is None else minimise(np.concatenate([first.x, start[d + 2:]]), False,
                                                  max(max_fun - first.nfev, 1))
        seconds = time.perf_counter() - started
        kernel, noise, z = unpack(jnp.asarray(fitted.x), m is None)
        mean, var = (np.asarray(a) for a in predict_f(kernel, z, noise, jnp.asarray(x), jnp.asarray(y),
                                                      jnp.asarray(data["x_test"]), power))
    y_test, var_y = data["y_test"], var + float(noise)
    nll = -norm.logpdf(y_test, mean, np.sqrt(var_y))
    trivial = -norm.logpdf(y_test, y.mean(), y.std())
    return {"smse": float(np.mean((y_test - mean) ** 2) / np.var(y_test)), "smll": float(np.mean(nll - trivial)),
            "nlml_per_point": float(fitted.fun), "evaluations": int(first.nfev + (0 if m is None else fitted.nfev)),
            "seconds": round(seconds, 2)}


def synthetic(draws: int, ms: list[int], max_fun: int, done: dict, save) -> None:
    """Every draw's full GP and (M, α) fits, appended to ``done`` (keys ``"draw/M/alpha"``, M = "full")."""
    for seed in range(draws):
        fit_all(draw(seed), str(seed) + "/{}/{}", seed, ms, max_fun, done, save)


def fit_all(data: dict, key: str, seed: int, ms: list[int], max_fun: int, done: dict, save) -> None:
    """The full GP and every (M, α) fit of :func:`fit_collapsed` on ``data`` not yet in ``done``, each under
    ``key.format(M, alpha)`` (M = "full"), saved after each."""
    for m, alpha in [("full", None)] + [(m, alpha) for m in ms for alpha in ALPHAS]:
        name = key.format(m, alpha)
        if name not in done:
            done[name] = fit_collapsed(data, None if m == "full" else m, alpha or 0.0, max_fun, seed)
            print(name, done[name], flush=True)
            save()


# --- §4.2: real regression sets -----------------------------------------------------------------------

def regression_split(name: str, split: int) -> dict:
    """Split ``split`` of set ``name``: a random 90/10 train/test split (seed = split), inputs and targets
    standardised by the training rows' means and deviations (Bui, Yan & Turner 2017, §4.2 and App. I.2: 20
    random 90/10 splits)."""
    ds = datasets.load(name)
    order = np.random.default_rng(split).permutation(len(ds.y))
    test, train = order[:round(0.1 * len(ds.y))], order[round(0.1 * len(ds.y)):]
    mean, std = ds.x[train].mean(0), ds.x[train].std(0)
    std = np.where(std > 0, std, 1.0)
    y_mean, y_std = ds.y[train].mean(), ds.y[train].std()
    return {"x": (ds.x[train] - mean) / std, "y": (ds.y[train] - y_mean) / y_std,
            "x_test": (ds.x[test] - mean) / std, "y_test": (ds.y[test] - y_mean) / y_std}


def regression(names: list[str], splits: int, ms: list[int], max_fun: int, done: dict, save) -> None:
    """Per split of each set, the full GP and every (M, α) fit of :func:`fit_collapsed` (keys
    ``"set/M/alpha/split"``, M = "full"), split k of every set before split k + 1 (a run cut short keeps
    whole splits)."""
    for split in range(splits):
        for name in names:
            fit_all(regression_split(name, split), name + "/{}/{}/" + str(split), split, ms, max_fun, done, save)


# --- §4.3: classification ----------------------------------------------------------------------------------

def classification(names: list[str], splits: int, ms: list[int], done: dict, save) -> None:
    """``SparseGPClassifier`` at each α and M on ``splits`` stratified 90/10 splits per set (keys
    ``"set/M/alpha/split"``), split k of every set before split k + 1 (a run cut short keeps whole splits)."""
    from sklearn.model_selection import StratifiedShuffleSplit

    from pep_gp import SparseGPClassifier

    sets = {name: datasets.load(name) for name in names}
    folds = {name: list(StratifiedShuffleSplit(splits, test_size=0.1, random_state=0).split(ds.x, ds.y))
             for name, ds in sets.items()}
    for split in range(splits):
        for name, ds in sets.items():
            train, test = folds[name][split]
            mean, std = ds.x[train].mean(0), ds.x[train].std(0)
            std = np.where(std > 0, std, 1.0)
            x_train, x_test = (ds.x[train] - mean) / std, (ds.x[test] - mean) / std
            for m in ms:
                for alpha in ALPHAS:
                    key = f"{name}/{m}/{alpha}/{split}"
                    if key in done:
                        continue
                    started = time.perf_counter()
                    clf = SparseGPClassifier(num_inducing=m, alpha=alpha, seed=split).fit(x_train, ds.y[train])
                    p = np.clip(clf.predict_proba(x_test)[np.arange(len(test)), ds.y[test]], 1e-300, 1.0)
                    done[key] = {"error": float(np.mean(p < 0.5)), "nll": float(-np.mean(np.log(p))),
                                 "steps": int(clf.n_iter_), "seconds": round(time.perf_counter() - started, 2)}
                    print(key, done[key], flush=True)
                    save()


# --- tables ----------------------------------------------------------------------------------------------

def _cell(values) -> str:
    return f"{np.mean(values):.3f} ± {standard_error(values):.3f}"


def _paired(rows: dict, base: dict, metric: str) -> str:
    """The mean paired difference ``rows − base`` of ``metric`` over their common keys, and (in brackets) that
    mean in its standard errors."""
    differences = [rows[k][metric] - base[k][metric] for k in rows if k in base]
    if len(differences) < 2:
        return "—"
    se = standard_error(differences)
    return f"{np.mean(differences):+.3f} ({np.mean(differences) / se:+.1f})" if se > 0 else f"{np.mean(differences):+.3f}"


def _cells(rows: dict, base: dict, alpha: float, metrics: tuple[str, ...]) -> str:
    """Table cells: each metric's mean ± s.e. over ``rows``, then each one's paired difference from ``base``
    (α = 0.5's runs; "—" on α = 0.5's own row)."""
    values = list(rows.values())
    return " | ".join([_cell([r[k] for r in values]) for k in metrics]
                      + ["—" if alpha == 0.5 else _paired(rows, base, k) for k in metrics])


def _label(alpha: float) -> str:
    return "0 (VFE)" if alpha == 0 else ("1 (EP)" if alpha == 1 else f"{alpha:g}")


def synthetic_table(runs: dict) -> str:
    """Per M: each α's SMSE, SMLL and NLML/N, mean ± s.e. over the draws, the paired SMSE and SMLL
    differences from α = 0.5 and the NLML/N difference from the full GP's (each in its s.e.); the full GP."""
    keys = [key.split("/") for key in runs]
    draws = sorted({int(d) for d, _, _ in keys})
    ms = sorted({m for _, m, _ in keys if m != "full"}, key=int)
    full = {d: runs[f"{d}/full/None"] for d in draws if f"{d}/full/None" in runs}
    lines = [f"Draws: {len(draws)}; mean ± standard error over the draws, lower is better; in brackets a paired "
             "difference in its standard errors.", "",
             "| M | α | SMSE | SMLL | SMSE − α = 0.5's | SMLL − α = 0.5's | NLML / N | NLML / N − full GP's |",
             "|---|---|---|---|---|---|---|---|"]
    for m in ms:
        lines += _alpha_lines(f"{m} | ", lambda alpha: {d: runs[f"{d}/{m}/{alpha}"] for d in draws
                                                         if f"{d}/{m}/{alpha}" in runs}, full)
    if full:
        lines.append(f"| full GP ({TRAIN}) | — | {_full_cells(list(full.values()))}")
    return "\n".join(lines)


def _alpha_lines(prefix: str, runs_at, full: dict) -> list[str]:
    """The table lines of each α at one M (``runs_at(α)``: its runs by draw or split), after the cells
    ``prefix`` (and the number of runs where it ends in ``{runs}``): SMSE and SMLL with their paired
    differences from α = 0.5's, NLML/N and its difference from the full GP's."""
    base, lines = runs_at(0.5), []
    for alpha in ALPHAS:
        rows = runs_at(alpha)
        if rows:
            lines.append(f"| {prefix.format(runs=len(rows))}{_label(alpha)} | {_cells(rows, base, alpha, ('smse', 'smll'))} "
                         f"| {_cell([r['nlml_per_point'] for r in rows.values()])} | {_paired(rows, full, 'nlml_per_point')} |")
    return lines


def _full_cells(values: list) -> str:
    """The full GP's SMSE, SMLL and NLML/N cells (mean ± s.e.), the difference cells empty."""
    return (f"{_cell([r['smse'] for r in values])} | {_cell([r['smll'] for r in values])} | | | "
            f"{_cell([r['nlml_per_point'] for r in values])} | |")


# Bui, Yan & Turner (2017), §4.2 (Fig. 4): in what fraction of the (set, split, M) experiments of their eight
# sets the first method's metric beats (is below) the second's: (first α, second α, metric, fraction).
PAPER_WINS = ((0.5, 0.0, "smse", 0.67), (0.5, 1.0, "smse", 0.78), (0.0, 1.0, "smse", 0.64),
              (1.0, 0.0, "smll", 0.93), (1.0, 0.5, "smll", 0.71), (0.5, 0.0, "smll", 0.93))


def win_fractions(runs: dict, first: float, second: float, metric: str, name: str | None = None) -> tuple[int, int]:
    """(experiments where α = ``first``'s ``metric`` is strictly below α = ``second``'s, experiments holding both)
    over the (set, split, M) of ``runs`` (keys ``"set/M/alpha/split"``; only set ``name`` where given)."""
    wins = total = 0
    for key, run in runs.items():
        set_name, m, alpha, split = key.split("/")
        if m == "full" or float(alpha) != first or (name is not None and set_name != name):
            continue
        other = runs.get(f"{set_name}/{m}/{second}/{split}")
        if other is not None:
            total += 1
            wins += run[metric] < other[metric]
    return wins, total


def _fraction(wins: int, total: int) -> str:
    return f"{wins / total:.0%} ({wins}/{total})" if total else "—"


def regression_table(runs: dict) -> str:
    """Per set and M: each α's SMSE, SMLL and NLML/N, mean ± s.e. over the splits, the paired SMSE and SMLL
    differences from α = 0.5 and the NLML/N difference from the full GP's (each in its s.e.); the full GP; then
    the paper's pairwise win fractions (§4.2, Fig. 4) beside pep's."""
    keys = [key.split("/") for key in runs]
    names = [name for name in REGRESSION if any(k[0] == name for k in keys)]
    lines = ["Mean ± standard error over the splits, lower is better; in brackets a paired difference in its "
             "standard errors.", "",
             "| set | M | splits | α | SMSE | SMLL | SMSE − α = 0.5's | SMLL − α = 0.5's | NLML / N | NLML / N − full GP's |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name in names:
        splits = sorted({int(s) for n, _, _, s in keys if n == name})
        full = {s: runs[f"{name}/full/None/{s}"] for s in splits if f"{name}/full/None/{s}" in runs}
        for m in sorted({int(m) for n, m, _, _ in keys if n == name and m != "full"}):
            lines += _alpha_lines(f"{name} | {m} | {{runs}} | ", lambda alpha: {
                s: runs[f"{name}/{m}/{alpha}/{s}"] for s in splits if f"{name}/{m}/{alpha}/{s}" in runs}, full)
        if full:
            lines.append(f"| {name} | full GP | {len(full)} | — | {_full_cells(list(full.values()))}")
    lines += ["", "Pairwise wins: the fraction of (set, split, M) experiments in which the first method's metric is "
              "below the second's (the paper: pooled over its eight sets, Fig. 4).", "",
              f"| first beats second | metric | the paper | pep, pooled | {' | '.join(f'pep, {n}' for n in names)} |",
              "|---|---|---|---|" + "---|" * len(names)]
    for first, second, metric, paper in PAPER_WINS:
        cells = [_fraction(*win_fractions(runs, first, second, metric))]
        cells += [_fraction(*win_fractions(runs, first, second, metric, name)) for name in names]
        lines.append(f"| {_label(first)} beats {_label(second)} | {metric.upper()} | {paper:.0%} | {' | '.join(cells)} |")
    return "\n".join(lines)


def classification_table(runs: dict) -> str:
    """Per set and M: each α's test error and NLL, mean ± s.e. over the splits, and the paired differences
    from α = 0.5 (positive: worse than α = 0.5), each in its standard errors."""
    keys = [key.split("/") for key in runs]
    settings = sorted({(name, int(m)) for name, m, _, _ in keys}, key=lambda s: (CLASSIFICATION.index(s[0]), s[1]))
    lines = ["| set | M | splits | α | test error | test NLL | error − α = 0.5's | NLL − α = 0.5's |",
             "|---|---|---|---|---|---|---|---|"]
    for name, m in settings:
        splits = sorted({int(s) for n, mm, _, s in keys if n == name and int(mm) == m})
        base = {s: runs[f"{name}/{m}/0.5/{s}"] for s in splits if f"{name}/{m}/0.5/{s}" in runs}
        for alpha in ALPHAS:
            rows = {s: runs[f"{name}/{m}/{alpha}/{s}"] for s in splits if f"{name}/{m}/{alpha}/{s}" in runs}
            if rows:
                lines.append(f"| {name} | {m} | {len(rows)} | {_label(alpha)} | {_cells(rows, base, alpha, ('error', 'nll'))} |")
    return "\n".join(lines)


def classification_summary(runs: dict) -> str:
    """Pooled over the (set, M) cells: per α, its mean rank among the α by test NLL and by test error (1: the
    lowest of the six on a split; ties share their mean rank), and the cells where its paired difference from
    α = 0.5 is more than two standard errors below zero (better) or above (worse)."""
    keys = [key.split("/") for key in runs]
    cells = sorted({(name, m) for name, m, _, _ in keys})
    lines = ["| α | mean rank, NLL | mean rank, error | NLL better than α = 0.5's (> 2 s.e.) | NLL worse | "
             "error better | error worse |", "|---|---|---|---|---|---|---|"]
    ranks = {metric: {alpha: [] for alpha in ALPHAS} for metric in ("nll", "error")}
    verdicts = {(alpha, metric): [0, 0] for alpha in ALPHAS for metric in ("nll", "error")}
    for name, m in cells:
        splits = sorted({s for n, mm, _, s in keys if (n, mm) == (name, m)})
        complete = [s for s in splits if all(f"{name}/{m}/{alpha}/{s}" in runs for alpha in ALPHAS)]
        for metric in ("nll", "error"):
            for s in complete:
                values = [runs[f"{name}/{m}/{alpha}/{s}"][metric] for alpha in ALPHAS]
                for alpha, rank in zip(ALPHAS, rankdata(values)):
                    ranks[metric][alpha].append(rank)
            for alpha in ALPHAS:
                differences = [runs[f"{name}/{m}/{alpha}/{s}"][metric] - runs[f"{name}/{m}/0.5/{s}"][metric]
                               for s in complete]
                se = standard_error(differences) if len(differences) > 1 else 0.0
                if alpha != 0.5 and se > 0 and abs(np.mean(differences)) > 2 * se:
                    verdicts[alpha, metric][int(np.mean(differences) > 0)] += 1
    for alpha in ALPHAS:
        counts = ["—" if alpha == 0.5 else f"{verdicts[alpha, metric][worse]} of {len(cells)}"
                  for metric in ("nll", "error") for worse in (0, 1)]
        lines.append(f"| {_label(alpha)} | {np.mean(ranks['nll'][alpha]):.2f} | {np.mean(ranks['error'][alpha]):.2f} | "
                     + " | ".join(counts) + " |")
    return "\n".join(lines)


def table(result: dict) -> str:
    """The results page's tables of one ``bench_power_ep`` JSON (a test checks that the page holds them)."""
    parts = []
    if result.get("synthetic"):
        parts.append(f"**§4.1, synthetic regression** ({result['synthetic_settings']})\n\n" + synthetic_table(result["synthetic"]))
    if result.get("regression"):
        parts.append(f"**§4.2, real regression sets** ({result['regression_settings']})\n\n"
                     + regression_table(result["regression"]))
    if result.get("classification"):
        parts.append(f"**§4.3, classification** ({result['classification_settings']})\n\n"
                     + classification_table(result["classification"]))
        parts.append("Pooled over the sets and M of §4.3: each α's mean rank among the six (per split; 1 is the "
                     "lowest NLL or error) and the (set, M) cells where it differs from α = 0.5 by more than two "
                     "standard errors of the paired difference.\n\n" + classification_summary(result["classification"]))
    return "\n\n".join(parts)


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.bench_power_ep``."""
    parser = arguments(__doc__)
    parser.add_argument("--synthetic", action="store_true", help="§4.1: the synthetic GP draws")
    parser.add_argument("--regression", action="store_true", help="§4.2: the real regression sets")
    parser.add_argument("--classification", action="store_true", help="§4.3: the classification sets")
    parser.add_argument("--draws", type=int, default=10, help="synthetic data sets (the paper: 30)")
    parser.add_argument("--ms", type=int, nargs="+", default=None, help="pseudo-point counts (synthetic default 5 20 50 100, "
                        "regression 10 50, classification 20; the paper: 5–500, 5–200 and 10–100)")
    parser.add_argument("--max-fun", type=int, default=2000, help="L-BFGS-B evaluations per synthetic or regression fit (the paper: 2000)")
    parser.add_argument("--splits", type=int, default=5, help="90/10 splits per regression or classification set (the paper: 20)")
    parser.add_argument("--datasets", nargs="+", default=list(CLASSIFICATION), choices=CLASSIFICATION)
    parser.add_argument("--table", action="store_true", help="print the results page's tables of the committed JSON")
    return parser


def main() -> None:
    args = cli().parse_args()
    old = read_results(NAME)
    if args.table:
        print(table(old))
        return
    result = {key: old[key] for key in ("synthetic", "synthetic_settings", "regression", "regression_settings",
                                        "classification", "classification_settings") if key in old}

    def save():
        write_results(NAME, result, echo=False)  # each fit prints its own line

    if args.synthetic:
        ms = args.ms or [5, 20, 50, 100]
        result["synthetic_settings"] = (f"{args.draws} draws (the paper: 30), M ∈ {{{', '.join(map(str, ms))}}} "
                                        f"(the paper: 5–500), L-BFGS-B ≤ {args.max_fun} evaluations")
        synthetic(args.draws, ms, args.max_fun, result.setdefault("synthetic", {}), save)
    if args.regression:
        ms = args.ms or [10, 50]
        result["regression_settings"] = (f"{', '.join(REGRESSION)} (the paper: 8 UCI sets), {args.splits} random 90/10 "
                                         f"splits (the paper: 20), M ∈ {{{', '.join(map(str, ms))}}} (the paper: "
                                         f"5–200), L-BFGS-B ≤ {args.max_fun} evaluations (the paper: L-BFGS, 2000)")
        regression(list(REGRESSION), args.splits, ms, args.max_fun, result.setdefault("regression", {}), save)
    if args.classification:
        ms = args.ms or [20]
        result["classification_settings"] = (f"{args.splits} stratified 90/10 splits (the paper: 20), "
                                             f"M ∈ {{{', '.join(map(str, ms))}}} (the paper: 10–100), "
                                             "SparseGPClassifier's defaults otherwise")
        classification(args.datasets, args.splits, ms, result.setdefault("classification", {}), save)


if __name__ == "__main__":
    main()
