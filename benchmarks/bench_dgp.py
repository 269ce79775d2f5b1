"""Deep GPs with approximate EP (Bui et al. 2016, §8.2) on Boston and concrete, beside GPyTorch's ``DeepGP``.

For each dataset: 20 random 90/10 splits made as the PBP protocol (``numpy.random.seed(1)``, one
permutation per split, ``round(0.9 n)`` training rows, indices int64); inputs and targets standardised
with the training rows' statistics; test log-likelihood and RMSE in the original units, mean ± standard
error over the splits; seconds per fit. pep's models are :class:`pep_gp.DeepGPRegressor` with
``hidden_dims`` ``()`` (the GP), ``(1,)``, ``(2,)``, ``(3,)`` (the paper's DGP-1/2/3) and ``(2, 2)``, trained with the protocol's fixed steps
and learning rate, ``dgp2-defaults``: width 2 at the estimator's own defaults (what a user who does not
copy the protocol gets), and ``dgp2-lr0.05``: width 2 at the defaults it had before (Adam at 0.05, the
stopping rule, at most 2,000 steps); GPyTorch's is the architecture of
its documented deep-GP example (doubly stochastic VI: linear-mean hidden layers, constant-mean output
layer, scaled ARD RBF kernels, Cholesky variational distributions, learned inducing inputs, Gaussian
likelihood, ``DeepApproximateMLL``, ``--samples`` likelihood samples in training) with pep's hidden widths
and M, the same rows per step, number of Adam steps and learning rate, on the same splits in the same
run. Every step sees all training rows unless ``--batch-size`` is given (the estimators' default).

Both libraries' test log-likelihood is scored by both rules: ``test_ll``, the Gaussian approximation of
the predictive (pep: its moment-matched forward pass, as the paper; GPyTorch: the Gaussian with the mean
and variance of its mixture), and ``test_ll_mixture``, the Monte Carlo mixture of ``--predict-samples``
equally weighted Gaussians (pep: :meth:`pep_gp.core.models.deep_gp.DeepGP.mixture_log_density`; GPyTorch:
its predictive with that many likelihood samples). ``seconds`` is the fit alone (construction,
initialisation, compilation on a worker's first fit of a shape, the training steps).

Splits are the outer loop (every model of every data set on split 0, then split 1, …), each (data set,
split) one unit of work for ``--jobs`` spawned worker processes, each pinned to its own core before its
first computation (one thread each: torch runs with one thread, XLA sizes its pool by the cores it may
use). The JSON is rewritten after every split with the summaries over the splits done so far
(``splits_done``), so an interrupted run keeps a like-for-like comparison, and ``--continue`` runs the
splits it did not reach. ``--table NAME ...`` prints the results page's table of committed results. Needs the
``bench`` extra (docs/results/deep-gp.md)::

    OPENBLAS_NUM_THREADS=1 taskset -c 0 .venv/bin/python -m benchmarks.bench_dgp --jobs 1 \\
        --splits 20 --inducing 100 --models dgp2 gp gpytorch --name bench_dgp_fullbatch
    OPENBLAS_NUM_THREADS=1 .venv/bin/python -m benchmarks.bench_dgp --jobs 2 \\
        --splits 20 --inducing 50 100 --models dgp2-lr0.05 dgp2+2 dgp2 gp gpytorch gpytorch2+2 \\
        --skip 50:dgp2-lr0.05 100:dgp2 100:gp 100:gpytorch --name bench_dgp_grid
    OPENBLAS_NUM_THREADS=1 .venv/bin/python -m benchmarks.bench_dgp --jobs 2 \\
        --splits 20 --models dgp2-defaults --name bench_dgp_defaults
    OPENBLAS_NUM_THREADS=1 .venv/bin/python -m benchmarks.bench_dgp --jobs 2 \\
        --splits 20 --inducing 50 100 --models dgp1 dgp3 --name bench_dgp_widths
    .venv/bin/python -m benchmarks.bench_dgp --table     # the results page's table, from all four
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from concurrent.futures import ProcessPoolExecutor
from itertools import repeat
from multiprocessing import get_context

import numpy as np
from scipy.special import logsumexp
from scipy.stats import norm

from benchmarks import datasets
from benchmarks._common import RESULTS, arguments, standard_error, two_se_sign, write_results

DATASETS = ("boston", "concrete")  # benchmarks.datasets: MASS Boston (target medv), modeldata concrete
PEP_MODELS = {"gp": (), "dgp1": (1,), "dgp2": (2,), "dgp3": (3,), "dgp2+2": (2, 2), "dgp2-defaults": (2,), "dgp2-lr0.05": (2,)}
PAPERS_MODEL = {"early_stopping": False, "input_mean_function": None}
"""Bui et al.'s model and protocol on every row: without the early stopping on held-out rows and the line in the inputs
that ``DeepGPRegressor``'s defaults add (issue 63)."""
OWN_FITS = {"dgp2-defaults": PAPERS_MODEL,
            "dgp2-lr0.05": {"learning_rate": 0.05, "max_iter": 2000, "tol": 1e-4, **PAPERS_MODEL}}
"""pep models fitted with other settings than the protocol's: ``DeepGPRegressor``'s defaults on every row with the
papers' model (:data:`PAPERS_MODEL`), and its defaults before issue 28 (Adam at 0.05, the stopping rule, at most
2,000 steps)."""
GPYTORCH_MODELS = {"gpytorch": (2,), "gpytorch2+2": (2, 2)}
LABELS = {"gp": "pep GP (L = 1)", "dgp1": "pep DGP, hidden width 1", "dgp2": "pep DGP, hidden width 2",
          "dgp3": "pep DGP, hidden width 3", "dgp2+2": "pep DGP, hidden widths 2+2",
          "dgp2-defaults": "pep DGP, width 2, estimator defaults on every row, zero input mean",
          "dgp2-lr0.05": "pep DGP, width 2, Adam 0.05 + stopping rule",
          "gpytorch": "GPyTorch DeepGP, width 2", "gpytorch2+2": "GPyTorch DeepGP, widths 2+2"}
METRICS = ("test_ll", "test_ll_mixture", "rmse", "seconds")
PAGE_RESULTS = ("bench_dgp_fullbatch", "bench_dgp_grid", "bench_dgp_defaults", "bench_dgp_widths")  # the runs of docs/results/deep-gp.md's table
WINDOW = 25  # steps per mean of the energy trace kept per pep fit (the estimators' stopping-rule window)


def load(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and target of regression set ``name`` (:func:`benchmarks.datasets.load`)."""
    ds = datasets.load(name)
    return ds.x, ds.y


def pbp_splits(n_rows: int, count: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """PBP's splits: seed 1, one permutation per split, the first ``round(0.9 n)`` rows train (int64)."""
    rng = np.random.RandomState(1)
    end = int(round(n_rows * 0.9))
    splits = []
    for _ in range(count):
        order = rng.choice(n_rows, n_rows, replace=False).astype(np.int64)
        splits.append((order[:end], order[end:]))
    return splits


def scores(y, mean, var) -> dict[str, float]:
    """Test log-likelihood of ``N(mean, var)`` and RMSE of ``mean`` (original units)."""
    return {"test_ll": float(np.mean(norm.logpdf(y, mean, np.sqrt(var)))),
            "rmse": float(np.sqrt(np.mean((y - mean) ** 2)))}


def mixture_scores(y, means, variances) -> dict[str, float]:
    """Both rules for an equally weighted Gaussian mixture per row (components ``[S, B]``, original units):
    the mixture's log density, and that of the Gaussian with its mean and variance; RMSE of its mean."""
    samples = means.shape[0]
    mean = means.mean(0)
    moments = scores(y, mean, (variances + means**2).mean(0) - mean**2)
    mixture = logsumexp(norm.logpdf(y[None], means, np.sqrt(variances)), axis=0) - math.log(samples)
    return {**moments, "test_ll_mixture": float(np.mean(mixture))}


def fit_pep(hidden, x, y, x_test, y_test, args, fit: dict | None = None) -> dict[str, float]:
    """pep's :class:`~pep_gp.DeepGPRegressor` at ``hidden``, with the protocol's steps and learning rate or
    the estimator arguments ``fit`` (:data:`OWN_FITS`); both rules (the mixture from
    :meth:`~pep_gp.core.models.deep_gp.DeepGP.mixture_log_density`, key ``--seed``)."""
    import jax
    import jax.numpy as jnp

    from pep_gp import DeepGPRegressor
    from pep_gp.core import float64

    start = time.perf_counter()
    protocol = fit if fit is not None else {"max_iter": args.steps, "tol": 0, "learning_rate": args.learning_rate,
                                            **PAPERS_MODEL}
    model = DeepGPRegressor(hidden_dims=hidden, num_inducing=args.m, batch_size=args.batch_size, seed=args.seed,
                            **protocol).fit(x, y)
    seconds = time.perf_counter() - start
    mean, std = model.predict(x_test, return_std=True)
    with float64():
        targets = model.targets_
        density = jax.jit(model.model_.mixture_log_density, static_argnums=4)(
            model.params_, jnp.asarray((x_test - model.x_mean_) / model.x_std_), jnp.asarray((y_test - targets.shift) / targets.scale),
            jax.random.key(args.seed), args.predict_samples)
    mixture = float(np.mean(np.asarray(density))) - math.log(targets.scale)
    windows = model.energy_trace_[:len(model.energy_trace_) // WINDOW * WINDOW].reshape(-1, WINDOW).mean(1)
    return {**scores(y_test, mean, std**2), "test_ll_mixture": mixture, "seconds": seconds,
            "steps": int(model.n_iter_), "rejected_steps": int(model.n_rejected_steps_), "energy_windows": [float(e) for e in windows]}


def fit_gpytorch(hidden, x, y, x_test, y_test, args, predict_samples: int | None = None) -> dict[str, float]:
    """GPyTorch's documented deep-GP example architecture with hidden widths ``hidden``, trained on
    standardised data; scored by its mixture of ``predict_samples`` (default: the training's ``args.samples``)
    likelihood samples and by the Gaussian with that mixture's moments."""
    import gpytorch
    import torch
    from gpytorch.distributions import MultivariateNormal
    from gpytorch.kernels import RBFKernel, ScaleKernel
    from gpytorch.means import ConstantMean, LinearMean
    from gpytorch.mlls import DeepApproximateMLL, VariationalELBO
    from gpytorch.models.deep_gps import DeepGP, DeepGPLayer
    from gpytorch.variational import CholeskyVariationalDistribution, VariationalStrategy

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)

    class Layer(DeepGPLayer):
        def __init__(self, input_dims, output_dims, num_inducing, linear_mean):
            shape = torch.Size([]) if output_dims is None else torch.Size([output_dims])
            inducing = torch.randn(*shape, num_inducing, input_dims)
            variational = CholeskyVariationalDistribution(num_inducing, batch_shape=shape)
            strategy = VariationalStrategy(self, inducing, variational, learn_inducing_locations=True)
            super().__init__(strategy, input_dims, output_dims)
            self.mean_module = LinearMean(input_dims) if linear_mean else ConstantMean(batch_shape=shape)
            self.covar_module = ScaleKernel(RBFKernel(batch_shape=shape, ard_num_dims=input_dims), batch_shape=shape)

        def forward(self, inputs):
            return MultivariateNormal(self.mean_module(inputs), self.covar_module(inputs))

    class Model(DeepGP):
        def __init__(self, dims):
            super().__init__()
            widths = (dims, *hidden)
            self.hidden = torch.nn.ModuleList(Layer(a, b, args.m, linear_mean=True) for a, b in zip(widths, widths[1:]))
            self.last = Layer(hidden[-1], None, args.m, linear_mean=False)
            self.likelihood = gpytorch.likelihoods.GaussianLikelihood()

        def forward(self, inputs):
            for layer in self.hidden:
                inputs = layer(inputs)
            return self.last(inputs)

    start = time.perf_counter()
    x_mean, x_std = x.mean(0), np.where(x.std(0) > 0, x.std(0), 1.0)
    y_mean, y_std = y.mean(), y.std()
    tx = torch.as_tensor((x - x_mean) / x_std, dtype=torch.float32)
    ty = torch.as_tensor((y - y_mean) / y_std, dtype=torch.float32)
    model = Model(x.shape[1])
    optimizer = torch.optim.Adam(model.parameters(), lr=args.learning_rate)
    objective = DeepApproximateMLL(VariationalELBO(model.likelihood, model, tx.shape[0]))
    generator = torch.Generator().manual_seed(args.seed)
    order = torch.randperm(tx.shape[0], generator=generator)
    batch_size = args.batch_size or tx.shape[0]
    position = 0
    model.train()
    with gpytorch.settings.num_likelihood_samples(args.samples):
        for _ in range(args.steps):
            if position + batch_size > tx.shape[0]:
                order, position = torch.randperm(tx.shape[0], generator=generator), 0
            rows = order[position:position + batch_size]
            position += batch_size
            optimizer.zero_grad()
            loss = -objective(model(tx[rows]), ty[rows])
            loss.backward()
            optimizer.step()
    seconds = time.perf_counter() - start
    model.eval()
    with torch.no_grad(), gpytorch.settings.num_likelihood_samples(predict_samples or args.samples):
        test = torch.as_tensor((x_test - x_mean) / x_std, dtype=torch.float32)
        predictive = model.likelihood(model(test))  # a mixture over the samples: [S, N]
        means, variances = predictive.mean.double().numpy(), predictive.variance.double().numpy()
    return {**mixture_scores(y_test, means * y_std + y_mean, variances * y_std**2), "seconds": seconds,
            "steps": args.steps}


def summary(runs: list[dict[str, float]]) -> dict[str, float]:
    out = {}
    for key in METRICS + (("steps",) if all("steps" in r for r in runs) else ()):
        values = [r[key] for r in runs]
        out[key] = float(np.mean(values))
        out[f"{key}_se"] = standard_error(values)
    return out


PAIRS = {"dgp1": ("gp",), "dgp2": ("gp", "dgp1", "gpytorch"), "dgp3": ("gp", "dgp1"),
         "dgp2+2": ("gp", "dgp2", "gpytorch2+2"), "dgp2-defaults": ("dgp2",), "dgp2-lr0.05": ("dgp2",)}
"""What each pep deep GP is paired with: the one-layer GP, GPyTorch's model of the same widths, and (at
other fit settings, :data:`OWN_FITS`) the protocol's fit of the same model."""


def paired(rows: list[dict]) -> list[dict]:
    """Per data set and M, each pep DGP against the models of :data:`PAIRS` on the same splits (the first k
    PBP splits are the same in every run, so ``rows`` may come from several runs, told apart by a ``run``
    key): the mean difference ± standard error of both test log-likelihoods, the mean ratio of steps per
    fit, and the mean ratio of seconds per fit when both come from the same run (the seconds of two runs
    were taken under different loads, so they are not compared)."""
    out = []
    index = {(r["dataset"], r["M"], r["model"]): r for r in rows}
    for (name, m, model), row in index.items():
        for other in PAIRS.get(model, ()):
            baseline = index.get((name, m, other))
            if baseline is None:
                continue
            runs, base = row["splits"], baseline["splits"]
            pair = {"dataset": name, "M": m, "model": model, "versus": other, **differences(runs, base)}
            count = pair["splits"]
            if all("steps" in split for split in runs[:count] + base[:count]):
                pair["steps_ratio"] = float(np.mean([a["steps"] / b["steps"] for a, b in zip(runs[:count], base[:count])]))
            if row.get("run") == baseline.get("run"):
                ratios = [a["seconds"] / b["seconds"] for a, b in zip(runs[:count], base[:count])]
                pair["seconds_ratio"], pair["seconds_ratio_se"] = float(np.mean(ratios)), standard_error(ratios)
            out.append(pair)
    return out


def differences(runs: list[dict], base: list[dict]) -> dict:
    """Split-by-split differences ``runs − base`` over the splits both have (the first k PBP splits are the
    same in every run): mean and standard error of both test log-likelihoods and of the RMSE."""
    count = min(len(runs), len(base))
    out: dict = {"splits": count}
    for key in ("test_ll", "test_ll_mixture", "rmse"):
        values = [a[key] - b[key] for a, b in zip(runs[:count], base[:count])]
        out[key], out[f"{key}_se"] = float(np.mean(values)), standard_error(values)
    return out


CLAIMS = (("a DGP beats the GP at equal M", [(f"dgp{w}", m, "gp", m) for m in (50, 100) for w in (1, 2, 3)]),
          ("DGP-2 and DGP-3 beat DGP-1", [(f"dgp{w}", m, "dgp1", m) for m in (50, 100) for w in (2, 3)]),
          ("M = 100 beats M = 50", [(model, 100, model, 50) for model in ("gp", "dgp1", "dgp2", "dgp3")]))
"""Bui et al. (2016, §8.2)'s three relative claims on the UCI regression grid, each as the comparisons
``(model, M, baseline, M)`` that test it (DGP-w: one hidden layer of width w)."""


PAPER = {  # Bui et al. 2016, Table 3: test log-likelihood (nats) of the GP and DGP-1/2/3 at M = 50 and 100
    "boston": {50: {"gp": -2.22, "dgp1": -2.33, "dgp2": -2.17, "dgp3": -2.09},
               100: {"gp": -2.16, "dgp1": -2.37, "dgp2": -2.09, "dgp3": -2.13}},
    "concrete": {50: {"gp": -2.85, "dgp1": -3.13, "dgp2": -2.61, "dgp3": -2.63},
                 100: {"gp": -2.65, "dgp1": -2.92, "dgp2": -2.43, "dgp3": -2.44}},
}


def verdict(difference: float, se: float) -> str:
    """A claim that the difference is positive: confirmed beyond two standard errors, contradicted beyond
    two the other way, otherwise not shown at this many splits."""
    return {1: "confirmed", -1: "contradicted", 0: "not shown (within 2 s.e.)"}[two_se_sign(difference, se)]


def claims(rows: list[dict]) -> list[dict]:
    """Every comparison of :data:`CLAIMS` that ``rows`` (:func:`tagged_rows` of several runs) hold, per data
    set: the paired differences of :func:`differences`, the :func:`verdict` of the Gaussian rule's (the
    paper's predictive, moment-matched) and the paper's own difference of means (:data:`PAPER`; its
    standard errors are of unpaired means, so none is given for the difference)."""
    index = {(r["dataset"], r["M"], r["model"]): r["splits"] for r in rows}
    out = []
    for claim, comparisons in CLAIMS:
        for name in DATASETS:
            for model, m, base, base_m in comparisons:
                if (name, m, model) in index and (name, base_m, base) in index:
                    pair = differences(index[name, m, model], index[name, base_m, base])
                    out.append({"claim": claim, "dataset": name, "model": model, "M": m, "versus": base,
                                "versus_M": base_m, **pair, "verdict": verdict(pair["test_ll"], pair["test_ll_se"]),
                                "paper": round(PAPER[name][m][model] - PAPER[name][base_m][base], 2)})
    return out


def claims_table(results: list[dict]) -> str:
    """The results page's table of :func:`claims` over the committed runs."""
    lines = ["| claim | data | model | against | test log-lik. difference, Gaussian | difference, mixture | "
             "RMSE difference | splits | verdict (Gaussian rule) | the paper's difference |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in claims(tagged_rows(results)):
        lines.append(f"| {r['claim']} | {r['dataset']} | {LABELS[r['model']]}, M = {r['M']} | {LABELS[r['versus']]}, "
                     f"M = {r['versus_M']} | {r['test_ll']:+.3f} ± {r['test_ll_se']:.3f} | {r['test_ll_mixture']:+.3f} ± "
                     f"{r['test_ll_mixture_se']:.3f} | {r['rmse']:+.2f} ± {r['rmse_se']:.2f} | {r['splits']} | {r['verdict']} "
                     f"| {r['paper']:+.2f} |")
    return "\n".join(lines)


def paper_table(results: list[dict]) -> str:
    """pep's test log-likelihoods beside Bui et al. (2016)'s Table 3 (:data:`PAPER`), model by model: the
    paper's absolute values, not only its differences. Its Table 3 may hold test rows in training (an index
    file read as int8 in the authors' released script), so its values are an upper mark, not a target."""
    lines = ["| data | M | model | pep test log-lik., Gaussian rule | the paper's Table 3 | pep − paper |",
             "|---|---|---|---|---|---|"]
    rows = {(r["dataset"], r["M"], r["model"]): r for result in results for r in result["rows"]}
    for name in DATASETS:
        for m, models in PAPER.get(name, {}).items():
            for model, paper in models.items():
                if (row := rows.get((name, m, model))) is not None:
                    lines.append(f"| {name} | {m} | {LABELS[model]} | {row['test_ll']:.3f} ± {row['test_ll_se']:.3f} "
                                 f"| {paper:.2f} | {row['test_ll'] - paper:+.2f} |")
    return "\n".join(lines)


def tagged_rows(results: list[dict]) -> list[dict]:
    """The rows of several runs for :func:`paired`: each tagged with its run, each split with its steps (runs
    made before a fit's steps were kept ran the protocol's fixed steps)."""
    return [{**row, "run": run, "splits": [{"steps": result["settings"]["steps"], **split} for split in row["splits"]]}
            for run, result in enumerate(results) for row in result["rows"]]


def table(results: list[dict]) -> str:
    """The results page's table of ``bench_dgp`` results (a test checks that docs/results/deep-gp.md holds the committed one)."""
    samples = {r["settings"]["predict_samples"] for r in results}
    lines = ["| data | M | model | test log-lik., Gaussian | test log-lik., mixture of "
             f"{'/'.join(map(str, sorted(samples)))} | test RMSE | s / fit | steps | splits |",
             "|---|---|---|---|---|---|---|---|---|"]
    rows = sorted(((r, result["settings"]["steps"]) for result in results for r in result["rows"]),
                  key=lambda pair: (list(DATASETS).index(pair[0]["dataset"]), pair[0]["M"], list(LABELS).index(pair[0]["model"])))
    for r, steps in rows:
        lines.append(f"| {r['dataset']} | {r['M']} | {LABELS[r['model']]} | {r['test_ll']:.3f} ± {r['test_ll_se']:.3f} "
                     f"| {r['test_ll_mixture']:.3f} ± {r['test_ll_mixture_se']:.3f} | {r['rmse']:.2f} ± {r['rmse_se']:.2f} "
                     f"| {r['seconds']:.1f} | {r.get('steps', steps):,.0f} | {len(r['splits'])} |")
    lines += ["", "| data | M | pep model | against | test log-lik. difference, Gaussian | difference, mixture | "
              "seconds per fit, ratio | steps, ratio | splits |", "|---|---|---|---|---|---|---|---|---|"]
    for r in paired(tagged_rows(results)):
        seconds = (f"{r['seconds_ratio']:.2f} ± {r['seconds_ratio_se']:.2f}" if "seconds_ratio" in r
                   else "– (two runs)")
        steps = f"{r['steps_ratio']:.2f}" if "steps_ratio" in r else "–"
        lines.append(f"| {r['dataset']} | {r['M']} | {LABELS[r['model']]} | {LABELS[r['versus']]} | "
                     f"{r['test_ll']:+.3f} ± {r['test_ll_se']:.3f} | {r['test_ll_mixture']:+.3f} ± "
                     f"{r['test_ll_mixture_se']:.3f} | {seconds} | {steps} | {r['splits']} |")
    return "\n".join(lines)


def readme_table(results: list[dict]) -> str:
    """README's deep-GP table: each pep deep GP against GPyTorch's of the same widths, by M, from the
    paired splits of ``results`` (both rules, and the seconds per fit of the same run)."""
    pairs = {(p["dataset"], p["M"], p["model"]): p for p in paired(tagged_rows(results))
             if p["versus"].startswith("gpytorch")}
    lines = ["| deep GP, pep − GPyTorch (same widths, M, splits, steps) | test log-likelihood, Gaussian rule "
             "(mixture of 100), Boston / concrete | seconds per fit, pep / GPyTorch, Boston / concrete | splits |",
             "|---|---|---|---|"]
    for m, model in sorted({(m, model) for _, m, model in pairs}):
        cells = [pairs[name, m, model] for name in DATASETS]
        widths = "+".join(map(str, PEP_MODELS[model]))
        likelihood = " / ".join(f"{p['test_ll']:+.3f} ± {p['test_ll_se']:.3f} ({p['test_ll_mixture']:+.3f} ± "
                                f"{p['test_ll_mixture_se']:.3f})" for p in cells)
        seconds = " / ".join(f"{p['seconds_ratio']:.2f}×" for p in cells)
        lines.append(f"| width{'s' if '+' in widths else ''} {widths}, M = {m} | {likelihood.replace('-', '−')} "
                     f"| {seconds} | {min(p['splits'] for p in cells)} |")
    return "\n".join(lines)


def pin_worker(counter) -> None:
    """Pin this worker process to its own core (the ``counter``-th worker to start, modulo the cores), before
    its first computation: torch and XLA then each run one thread."""
    with counter.get_lock():
        index = counter.value
        counter.value += 1
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[index % len(cores)]})


def fit_split(name: str, index: int, args: argparse.Namespace) -> dict[tuple[str, int], dict[str, float]]:
    """Every model of ``args`` at every M on split ``index`` of data set ``name`` (one worker's unit)."""
    x, y = load(name)
    train, test = pbp_splits(x.shape[0], args.splits)[index]
    data = (x[train], y[train], x[test], y[test])
    results = {}
    for m in args.inducing:
        args.m = m
        for model in args.models:
            if f"{m}:{model}" in args.skip:
                continue
            run = (fit_gpytorch(GPYTORCH_MODELS[model], *data, args, args.predict_samples)
                   if model in GPYTORCH_MODELS else fit_pep(PEP_MODELS[model], *data, args, OWN_FITS.get(model)))
            results[model, m] = {**run, "load_average": os.getloadavg()[0]}
            print(f"  {name} M={m} {model} split {index}: {results[model, m]}", flush=True)
    return results


def finished_splits(name: str, settings: dict) -> tuple[dict[tuple[str, int, str], list], int]:
    """The per-split results of the models in ``results/NAME.json`` and how many splits it finished; the
    file's settings must be ``settings`` but for ``jobs`` and ``splits`` (the first k of PBP's splits do not
    depend on how many follow)."""
    old = json.loads((RESULTS / f"{name}.json").read_text())
    differ = sorted(k for k in settings if k not in ("jobs", "splits") and old["settings"].get(k) != settings[k])
    if differ:
        raise ValueError(f"--continue: results/{name}.json was run with other settings: "
                         + ", ".join(f"{k}={old['settings'].get(k)!r} (now {settings[k]!r})" for k in differ))
    done = int(old.get("splits_done", 0))
    return {(row["dataset"], row["M"], row["model"]): row["splits"][:done] for row in old["rows"]}, done


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.bench_dgp``."""
    parser = arguments(__doc__, splits=20, name="bench_dgp")
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--models", nargs="+", default=["gp", "dgp2", "gpytorch"],
                        choices=[*PEP_MODELS, *GPYTORCH_MODELS])
    parser.add_argument("--inducing", nargs="+", type=int, default=[100], help="M per GP (the paper: 50 and 100)")
    parser.add_argument("--skip", nargs="*", default=[], help="M:model pairs not to run (e.g. 100:gp)")
    parser.add_argument("--steps", type=int, default=1000, help="Adam steps per fit (every model)")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="rows per Adam step (every model; default: all training rows, the estimator's default)")
    parser.add_argument("--learning-rate", type=float, default=0.01)
    parser.add_argument("--samples", type=int, default=3, help="GPyTorch's likelihood samples in training")
    parser.add_argument("--predict-samples", type=int, default=100,
                        help="components of both libraries' Monte Carlo mixture predictive")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1, help="worker processes, each fitting one (data set, split)")
    parser.add_argument("--continue", dest="resume", action="store_true",
                        help="keep the splits an earlier run with the same settings finished in results/NAME.json "
                             "and run the rest (every fit is deterministic: the same numbers as one run)")
    parser.add_argument("--table", nargs="*", metavar="NAME",
                        help=f"print the results page's table of results/NAME.json ... (default: {' '.join(PAGE_RESULTS)})")
    return parser


def main(argv=None) -> dict:
    parser = cli()
    args = parser.parse_args(argv)
    if args.table is not None:
        print(table([json.loads((RESULTS / f"{name}.json").read_text()) for name in args.table or PAGE_RESULTS]))
        return {}
    settings = {k: v for k, v in vars(args).items() if k not in ("name", "resume", "table")}
    results = {"settings": settings, "rows": []}
    sizes = {name: load(name)[0].shape for name in args.datasets}
    runs, first = finished_splits(args.name, settings) if args.resume else ({}, 0)
    if first >= args.splits:
        parser.error(f"--continue: results/{args.name}.json already has all {args.splits} splits")
    units = [(name, index) for index in range(first, args.splits) for name in args.datasets]
    context = get_context("spawn")
    with ProcessPoolExecutor(args.jobs, mp_context=context, initializer=pin_worker,
                             initargs=(context.Value("i", 0),)) as pool:
        done = pool.map(fit_split, *zip(*units), repeat(args, len(units)))
        for (name, index), split in zip(units, done):
            for (model, m), run in split.items():
                runs.setdefault((name, m, model), []).append(run)
            if name != args.datasets[-1]:
                continue
            # after every split of every data set: an interrupted run keeps what it measured
            results["rows"] = [{"dataset": name, "n": int(sizes[name][0]), "d": int(sizes[name][1]), "model": model,
                                "M": m, **summary(split_runs), "splits": split_runs}
                               for (name, m, model), split_runs in runs.items()]
            results["paired"] = paired(results["rows"])
            results["splits_done"] = index + 1
            write_results(args.name, results)
    print(table([results]), flush=True)
    return results


if __name__ == "__main__":
    main()
