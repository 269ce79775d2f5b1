"""Everyday tables (issue 63): every estimator at its defaults on real tables of 100–5,000 rows, each fit in
a fresh process and again in a second one (the persistent compilation cache filled by the first), side by
side in the same run with scikit-learn's Gaussian processes, a linear model and GPyTorch.

The tables (all offline; none of them the tables the defaults were tuned on: wine, iris, vehicle, waveform,
Chile): binary breast-cancer, pima, ionosphere, sonar; multi-class glass (6 classes), digits (10) and
satellite's first three classes (3,000 rows drawn); regression boston, concrete, diabetes; counts coal
(yearly mining disasters). One stratified 80/20 split per table (seed 0). Past the estimators' 5,000 rows of a
full-batch fit until 12-05 (``--tables waveform-2``): waveform's first two classes of 10,000 generated rows
(``benchmarks.datasets``; about 5,300 training rows).

The fits, each in its own process started by this one (``--python``, default this interpreter, whose modules and
pep's sources are first compiled to bytecode as an install leaves them: :func:`bytecode_compiled`):

* pep: every estimator of the table's task at its defaults (binary: ``SparseGPClassifier``,
  ``ExactGPClassifier``, ``TiedEPClassifier``, ``DeepGPClassifier``; multi-class: ``MultiClassGPClassifier``,
  ``DirectMultiClassGPClassifier``, ``MultiClassEPClassifier``, ``MultiClassDeepGPClassifier``; regression:
  ``SparseGPRegressor``, ``CollapsedGPRegressor``, ``DeepGPRegressor``; counts:
  ``SparseGPRegressor(likelihood="poisson")``), twice: with an empty compilation cache and with the cache the
  first process filled (``PEP_COMPILATION_CACHE``, one directory per table and fit: until 12-05 one per run of
  this benchmark, so a fit's first process could load what another fit's had compiled);
* scikit-learn: ``GaussianProcessClassifier`` / ``GaussianProcessRegressor`` (a constant times an ARD squared
  exponential, plus a white noise for regression, ``normalize_y``), and logistic regression / Bayesian ridge /
  Poisson regression on standardised inputs;
* GPyTorch (where ``--python`` imports it: ``pip install -e '.[bench]'``): the exact GP for regression (ARD
  squared exponential, constant mean, Adam 0.1 for 50 iterations as its tutorial) and SVGP for
  classification (100 inducing inputs drawn from the training rows, Bernoulli or softmax likelihood,
  minibatches of 256, Adam 0.01 for 300 steps), float32 as its users run it.

Per fit: seconds from the process's launch (the parent's clock just before it starts the process) to a fitted
model (interpreter and imports included, the table's loading excluded), of which the imports; the compiled
programs it ran (JAX's compile event, which also times a load from the persistent cache: how many, how many were
loaded, their seconds and the longest); steps and seconds per step; test NLL (per row, with the standard error
of the difference to each peer, paired over the test rows), error or RMSE, and 90 % interval coverage for
regression. The machine's float64 matrix-product GFLOP/s is measured beside.

Usage::

    .venv/bin/python -m benchmarks.bench_everyday [--tables NAME ...] [--fits NAME ...] [--timeout 600]
        [--python PATH] [--name bench_everyday]

Writes ``benchmarks/results/NAME.json``. Needs the ``bench`` extra's data readers (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from ._common import (arguments, bytecode_compiled, machine, standard_error, temporary_directory, train_exact_gpytorch,
                      uptime, write_results)

ROOT = Path(__file__).resolve().parents[1]

TABLES = {  # name: (task, dataset loader options)
    "breast-cancer": ("binary", {}), "pima": ("binary", {}), "ionosphere": ("binary", {}), "sonar": ("binary", {}),
    "glass": ("multiclass", {}), "digits": ("multiclass", {}), "satellite-3": ("multiclass", {"classes": 3}),
    "boston": ("regression", {}), "concrete": ("regression", {}), "diabetes": ("regression", {}),
    "coal": ("counts", {}),
    "waveform-2": ("binary", {"classes": 2, "rows": 10_000}),
}
MAX_ROWS = {"satellite-3": 3000}

PEP_FITS = {
    "binary": ["SparseGPClassifier", "ExactGPClassifier", "TiedEPClassifier", "DeepGPClassifier"],
    "multiclass": ["MultiClassGPClassifier", "DirectMultiClassGPClassifier", "MultiClassEPClassifier",
                   "MultiClassDeepGPClassifier"],
    "regression": ["SparseGPRegressor", "CollapsedGPRegressor", "DeepGPRegressor"],
    "counts": ["SparseGPRegressor(likelihood='poisson')"],
}
OPTIONS = {"SparseGPRegressor(likelihood='poisson')": ("SparseGPRegressor", {"likelihood": "poisson"}),
           "SparseGPClassifier(solver='adam')": ("SparseGPClassifier", {"solver": "adam"}),
           "TiedEPClassifier(solver='adam')": ("TiedEPClassifier", {"solver": "adam"})}
"""The fits whose label is not the estimator's name: the estimator and its (non-default) arguments. Those that are not
among :data:`PEP_FITS` run on a table of their estimator's task when ``--fits`` names them."""
PEERS = {
    "binary": ["logistic regression", "scikit-learn GP", "GPyTorch SVGP"],
    "multiclass": ["logistic regression", "scikit-learn GP", "GPyTorch SVGP"],
    "regression": ["Bayesian ridge", "scikit-learn GP", "GPyTorch exact GP"],
    "counts": ["Poisson regression"],
}
Z90 = 1.6448536269514722  # the standard normal's 95 % quantile: a central 90 % interval


# --- the table --------------------------------------------------------------------------------------------------

def load_table(name: str, seed: int = 0):
    """``(x_train, y_train, x_test, y_test, task)`` of ``name``: one (stratified, for labels) 80/20 split drawn
    with ``seed``."""
    from sklearn.model_selection import train_test_split

    task, options = TABLES[name]
    if name == "coal":
        from .datasets import coal_counts  # not from bench_qp, which imports pep: its import is the fit's

        year, counts = coal_counts()
        x, y = year[:, None].astype(np.float64), counts.astype(np.float64)
    elif name == "diabetes":  # scikit-learn's own copy (not in benchmarks.datasets' catalogue)
        from sklearn.datasets import load_diabetes

        x, y = load_diabetes(return_X_y=True)
    else:
        from .datasets import load

        data = load(re.sub(r"-\d+$", "", name), **options)  # satellite-3: satellite's first three classes
        x, y = data.x, data.y
    if name in MAX_ROWS:
        keep = np.sort(np.random.default_rng(0).choice(len(x), MAX_ROWS[name], replace=False))
        x, y = x[keep], y[keep]
    stratify = y if task in ("binary", "multiclass") else None
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=seed, stratify=stratify)
    return x_train, y_train, x_test, y_test, task


# --- one fit, in a fresh process --------------------------------------------------------------------------------

def child(fit: str, name: str, out: Path, started: float) -> None:
    """Fit ``fit`` on table ``name`` in this (fresh) process, launched at ``started`` (``time.time()`` of the
    parent: the process's own start time, as Linux gives it, counts from the boot time in whole seconds, measured
    0.55 s early here); write the per-row test NLL to ``out`` (npy) and print what the parent records, as one
    JSON line."""
    loading = time.time()
    x_train, y_train, x_test, y_test, task = load_table(name)
    loading = time.time() - loading
    before_import = time.time()
    if fit.startswith("GPyTorch"):
        result = _gpytorch(fit, task, x_train, y_train, x_test, y_test)
    elif fit in PEERS[task]:
        result = sklearn_fit(fit, task, x_train, y_train, x_test, y_test)
    else:
        result = _pep(fit, task, x_train, y_train, x_test, y_test)
    per_row_nll = result.pop("per_row_nll")
    np.save(out, per_row_nll)
    result.update(seconds_to_fitted=round(time.time() - started - loading - result.pop("predict_seconds"), 3),
                  import_seconds=round(result.pop("imported") - before_import, 3), test_nll=float(np.mean(per_row_nll)),
                  train_rows=len(x_train), test_rows=len(x_test), features=x_train.shape[1])
    print(json.dumps(result))


def _scored(task: str, y_test, proba=None, mean=None, std=None, rate=None) -> dict:
    """Per-row test NLL and the error / RMSE / coverage from a classifier's probabilities (columns in label
    order), a regressor's Gaussian predictive ``mean ± std``, or a count model's Poisson ``rate``."""
    from scipy import stats

    if task in ("binary", "multiclass"):
        p = np.clip(proba[np.arange(len(y_test)), y_test.astype(int)], 1e-300, None)
        return {"per_row_nll": -np.log(p), "error": float(np.mean(np.argmax(proba, axis=1) != y_test))}
    if task == "counts":
        return {"per_row_nll": -stats.poisson.logpmf(y_test, rate), "rmse": float(np.sqrt(np.mean((rate - y_test) ** 2)))}
    return {"per_row_nll": -stats.norm.logpdf(y_test, mean, std), "rmse": float(np.sqrt(np.mean((mean - y_test) ** 2))),
            "coverage_90": float(np.mean(np.abs(y_test - mean) <= Z90 * std))}


def _predicted(task: str, model, x_test, y_test) -> dict:
    """:func:`_scored` of a fitted scikit-learn-style ``model`` (pep's estimators, scikit-learn's): its
    probabilities, its Poisson rate, or its predictive mean and standard deviation."""
    if task in ("binary", "multiclass"):
        return _scored(task, y_test, proba=model.predict_proba(x_test))
    if task == "counts":
        return _scored(task, y_test, rate=model.predict(x_test))
    mean, std = model.predict(x_test, return_std=True)
    return _scored(task, y_test, mean=mean, std=std)


def pep_scored(task: str, model, x_test, y_test) -> dict:
    """:func:`_predicted` of a fitted pep estimator, a regressor's 90 % coverage by its own predictive's 5 % and
    95 % quantiles (a deep GP's predictive is not Gaussian)."""
    scored = _predicted(task, model, x_test, y_test)
    if task == "regression":
        low, high = model.predict_quantiles(x_test, (0.05, 0.95)).T
        scored["coverage_90"] = float(np.mean((y_test >= low) & (y_test <= high)))
    return scored


def _pep(fit: str, task: str, x_train, y_train, x_test, y_test) -> dict:
    import jax.monitoring

    compiles, hits = [], []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, duration, **_: compiles.append(duration) if event == "/jax/core/compile/backend_compile_duration" else None)
    jax.monitoring.register_event_listener(lambda event, **_: hits.append(event) if event.endswith("cache_hits") else None)
    import pep_gp

    estimator, options = OPTIONS.get(fit, (fit, {}))
    cls = getattr(pep_gp, estimator)  # pep_gp imports its estimators when first named (PEP 562): part of the import
    imported = time.time()
    model = cls(**options)
    start = time.time()
    model.fit(x_train, y_train)
    fit_seconds = time.time() - start
    compile_count, compile_seconds, loaded = len(compiles), float(sum(compiles)), len(hits)  # the fit's, not its predictions
    predicting = time.time()
    scored = pep_scored(task, model, x_test, y_test)
    steps = int(getattr(model, "n_iter_", 0) or 0)
    return {**scored, "imported": imported, "predict_seconds": time.time() - predicting, "fit_seconds": round(fit_seconds, 3),
            "steps": steps, "seconds_per_step": round((fit_seconds - compile_seconds) / steps, 5) if steps else None,
            "programs": compile_count, "programs_loaded_from_cache": loaded,
            "programs_compiled": compile_count - loaded, "compile_or_load_seconds": round(compile_seconds, 3),
            "longest_compile_or_load_seconds": round(max(compiles[:compile_count], default=0.0), 3),
            "solver": getattr(model, "solver_", None)}


def sklearn_fit(fit: str, task: str, x_train, y_train, x_test, y_test) -> dict:
    from sklearn.gaussian_process import GaussianProcessClassifier, GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
    from sklearn.linear_model import BayesianRidge, LogisticRegression, PoissonRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    imported = time.time()
    ard = ConstantKernel() * RBF(np.ones(x_train.shape[1]))
    model = make_pipeline(StandardScaler(), {
        "logistic regression": lambda: LogisticRegression(max_iter=5000),
        "Bayesian ridge": BayesianRidge, "Poisson regression": lambda: PoissonRegressor(max_iter=1000),
        "scikit-learn GP": (lambda: GaussianProcessClassifier(ard, random_state=0)) if task != "regression"
        else (lambda: GaussianProcessRegressor(ard + WhiteKernel(), normalize_y=True, random_state=0)),
    }[fit]())
    start = time.time()
    model.fit(x_train, y_train)
    fit_seconds = time.time() - start
    predicting = time.time()
    scored = _predicted(task, model, x_test, y_test)
    return {**scored, "imported": imported, "predict_seconds": time.time() - predicting, "fit_seconds": round(fit_seconds, 3)}


def _gpytorch(fit: str, task: str, x_train, y_train, x_test, y_test) -> dict:
    import gpytorch
    import torch

    imported = time.time()
    torch.manual_seed(0)
    mean_x, std_x = x_train.mean(0), x_train.std(0) + 1e-12
    tx, sx = (torch.tensor((a - mean_x) / std_x, dtype=torch.float32) for a in (x_train, x_test))
    start = time.time()
    if task == "regression":
        mean_y, std_y = y_train.mean(), y_train.std()
        ty = torch.tensor((y_train - mean_y) / std_y, dtype=torch.float32)

        class Exact(gpytorch.models.ExactGP):
            def __init__(self):
                super().__init__(tx, ty, gpytorch.likelihoods.GaussianLikelihood())
                self.mean = gpytorch.means.ConstantMean()
                self.covar = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=tx.shape[1]))

            def forward(self, x):
                return gpytorch.distributions.MultivariateNormal(self.mean(x), self.covar(x))

        model = train_exact_gpytorch(Exact(), tx, ty, steps=50, learning_rate=0.1)
        fit_seconds = time.time() - start
        predicting = time.time()
        with torch.no_grad(), gpytorch.settings.fast_pred_var():
            predictive = model.likelihood(model(sx))
            mean = predictive.mean.numpy().astype(np.float64) * std_y + mean_y
            std = np.sqrt(predictive.variance.numpy().astype(np.float64)) * std_y
        scored = _scored(task, y_test, mean=mean, std=std)
        steps = 50
    else:
        classes = int(max(y_train.max(), y_test.max())) + 1
        ty = torch.tensor(y_train, dtype=torch.float32 if classes == 2 else torch.long)
        latents = 1 if classes == 2 else classes
        inducing = tx[torch.randperm(len(tx))[:min(100, len(tx))]]

        class SVGP(gpytorch.models.ApproximateGP):
            def __init__(self):
                batch = torch.Size([]) if latents == 1 else torch.Size([latents])
                z = inducing if latents == 1 else inducing.expand(latents, *inducing.shape).clone()
                variational = gpytorch.variational.CholeskyVariationalDistribution(len(inducing), batch_shape=batch)
                strategy = gpytorch.variational.VariationalStrategy(self, z, variational, learn_inducing_locations=True)
                if latents > 1:
                    strategy = gpytorch.variational.IndependentMultitaskVariationalStrategy(strategy, num_tasks=latents)
                super().__init__(strategy)
                self.mean = gpytorch.means.ConstantMean(batch_shape=batch)
                self.covar = gpytorch.kernels.ScaleKernel(
                    gpytorch.kernels.RBFKernel(ard_num_dims=tx.shape[1], batch_shape=batch), batch_shape=batch)

            def forward(self, x):
                return gpytorch.distributions.MultivariateNormal(self.mean(x), self.covar(x))

        model = SVGP()
        likelihood = (gpytorch.likelihoods.BernoulliLikelihood() if latents == 1 else
                      gpytorch.likelihoods.SoftmaxLikelihood(num_classes=classes, mixing_weights=False))
        model.train(), likelihood.train()
        optimiser = torch.optim.Adam([*model.parameters(), *likelihood.parameters()], lr=0.01)
        elbo = gpytorch.mlls.VariationalELBO(likelihood, model, num_data=len(tx))
        generator = torch.Generator().manual_seed(0)
        for step in range(300):
            batch = torch.randperm(len(tx), generator=generator)[:256]
            optimiser.zero_grad()
            (-elbo(model(tx[batch]), ty[batch])).backward()
            optimiser.step()
        fit_seconds = time.time() - start
        predicting = time.time()
        model.eval(), likelihood.eval()
        with torch.no_grad(), gpytorch.settings.num_likelihood_samples(256):
            output = likelihood(model(sx))
            probs = output.probs.numpy().astype(np.float64)
        proba = np.column_stack([1 - probs, probs]) if latents == 1 else probs.mean(0)
        scored = _scored(task, y_test, proba=proba)
        steps = 300
    return {**scored, "imported": imported, "predict_seconds": time.time() - predicting,
            "fit_seconds": round(fit_seconds, 3), "steps": steps,
            "seconds_per_step": round(fit_seconds / steps, 5), "torch_threads": torch.get_num_threads()}


# --- the docs table ---------------------------------------------------------------------------------------------

def _seconds(record: dict) -> str:
    return f"{record['seconds_to_fitted']:.1f}" if "seconds_to_fitted" in record else record.get("ended", "–")


def _fit_row(name: str, fit: str, record: dict, gpytorch: dict | None, task: str) -> str:
    """One row of :func:`table`: a fit's seconds in both processes (and their ratio to GPyTorch's), its compiled
    programs, steps and scores, and its test NLL's difference to the linear model (± the paired standard error)."""
    first, second = record.get("first_process", record), record.get("second_process", {})
    if "seconds_to_fitted" not in first:
        return f"| {name} | {fit} | {_seconds(first)} | | | | | | | |"
    ratio = ""
    if gpytorch and "seconds_to_fitted" in gpytorch.get("first_process", {}) and fit in PEP_FITS[task] + list(OPTIONS):
        mine = [first["seconds_to_fitted"] / gpytorch["first_process"]["seconds_to_fitted"]]
        if "seconds_to_fitted" in second and "seconds_to_fitted" in gpytorch.get("second_process", {}):
            mine.append(second["seconds_to_fitted"] / gpytorch["second_process"]["seconds_to_fitted"])
        ratio = " (" + ", ".join(f"{value:.2f}×" for value in mine) + ")"
    programs = (f"{first['programs']} ({first['longest_compile_or_load_seconds']:.1f} s)" if first.get("programs")
                else "–")
    steps = f"{first['steps']} {first.get('solver') or ''}".strip() if first.get("steps") else "–"
    score = f"{first['error']:.3f}" if "error" in first else f"{first['rmse']:.3g}"
    coverage = f"{first['coverage_90']:.2f}" if "coverage_90" in first else "–"
    linear = PEERS[task][0]
    versus = first.get("nll_minus_peer", {}).get(linear)
    against = f"{versus['difference']:+.4f} ± {versus['standard_error']:.4f}" if versus else "–"
    return (f"| {name} | {fit} | {_seconds(first)}{ratio} | {_seconds(second) if second else '–'} | {programs} "
            f"| {steps} | {first['test_nll']:.4f} | {score} | {coverage} | {against} |")


def table(result: dict) -> str:
    """The docs table of a run: per table and fit, seconds from the process's launch to a fitted model in a fresh
    process and in a second one (pep's ratio to GPyTorch's in each, in brackets), the compiled programs (the
    longest compile or cache load), steps and solver, test NLL, error or RMSE, 90 % coverage, and the NLL's
    difference to the linear model's (negative: pep better)."""
    lines = ["| table | fit | fresh process, s (× GPyTorch) | second process, s | programs (longest, s) "
             "| steps | test NLL | error / RMSE | 90 % coverage | NLL − linear model (± s.e.) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, entry in result["tables"].items():
        fits = entry["fits"]
        gpytorch = next((record for fit, record in fits.items() if fit.startswith("GPyTorch")), None)
        lines += [_fit_row(name, fit, record, gpytorch, entry["task"]) for fit, record in fits.items()]
    return "\n".join(lines)


README_GROUPS = {"binary": ["SparseGPClassifier", "ExactGPClassifier", "TiedEPClassifier"],
                 "regression, counts": ["SparseGPRegressor", "CollapsedGPRegressor",
                                        "SparseGPRegressor(likelihood='poisson')"],
                 "multi-class": ["MultiClassGPClassifier", "DirectMultiClassGPClassifier"],
                 "deep GPs, untied multi-class EP": ["DeepGPClassifier", "DeepGPRegressor", "MultiClassDeepGPClassifier",
                                                     "MultiClassEPClassifier"]}
"""README's speed row: its columns, each the estimators whose default fits it spans."""


def _span(values: list[float], digits: int) -> str:
    low, high = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    return low if low == high else f"{low}–{high}"


def readme_table(results: list[dict]) -> str:
    """README's speed row: per group of estimators (:data:`README_GROUPS`), over every table of ``results`` (runs
    of this benchmark) where a default fit ended within the timeout, the seconds to a fitted model in a fresh and
    in a second process, and their ratios to GPyTorch's in the same run; fits past the timeout are counted."""
    fits: dict[str, list] = {}
    for result in results:
        for entry in result["tables"].values():
            gpytorch = next((r for fit, r in entry["fits"].items() if fit.startswith("GPyTorch")), {})
            for fit, record in entry["fits"].items():
                fits.setdefault(fit, []).append((record, gpytorch))
    cells = []
    for group in README_GROUPS.values():
        records = [pair for fit in group for pair in fits.get(fit, [])]
        timed = {process: [(r[process]["seconds_to_fitted"], g.get(process, {}).get("seconds_to_fitted"))
                           for r, g in records if "seconds_to_fitted" in r.get(process, {})]
                 for process in ("first_process", "second_process")}
        seconds = " / ".join(_span([mine for mine, _ in timed[p]], 1) for p in timed)
        ratios = " / ".join(_span([mine / theirs for mine, theirs in timed[p] if theirs], 2) + "×" for p in timed)
        late = sum("seconds_to_fitted" not in r["first_process"] for r, _ in records)
        cells.append(f"{seconds} s ({ratios})" + (f"; {late} past {results[0]['timeout_seconds']:.0f} s" if late else ""))
    runs = ", ".join(f"{r['date'][5:10]} {r['gflops_float64']:.0f} GFLOP/s" for r in results)
    header = (f"| [everyday tables](docs/results/everyday.md), defaults ({runs}) | "
              + " | ".join(README_GROUPS) + " |")
    return "\n".join([header, "|---" * (len(README_GROUPS) + 1) + "|",
                      "| seconds to a fitted model, fresh / second process (× GPyTorch's exact GP or SVGP, same run) | "
                      + " | ".join(cells) + " |"])


# --- the parent -------------------------------------------------------------------------------------------------

def launched(python: str, fit: str, name: str, out: Path, cache: Path, timeout: float) -> dict:
    """One fit in a fresh process: its JSON line, or how it ended."""
    env = {**os.environ, "PEP_COMPILATION_CACHE": str(cache)}
    started = time.time()
    args = [python, "-m", "benchmarks.bench_everyday", "--child", fit, name, str(out), repr(started)]
    try:
        done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"ended": f"stopped after the {timeout:.0f} s timeout", "wall_seconds": round(time.time() - started, 1)}
    if done.returncode != 0:
        return {"ended": f"exit code {done.returncode}", "stderr": done.stderr[-1500:]}
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "wall_seconds": round(time.time() - started, 2)}


def importable(python: str, module: str) -> bool:
    return subprocess.run([python, "-c", f"import {module}"], capture_output=True).returncode == 0


def gflops(size: int = 2000, repeats: int = 3) -> float:
    """float64 matrix-product GFLOP/s of this machine (numpy, best of ``repeats``)."""
    a = np.random.default_rng(0).normal(size=(size, size))
    best = min(_timed(lambda: a @ a) for _ in range(repeats))
    return round(2 * size**3 / best / 1e9, 1)


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def compared(rows: dict, work: Path, name: str) -> None:
    """Add to each pep fit its test-NLL difference to each peer that finished (pep − peer, nats per row) and the
    paired standard error of that difference over the test rows."""
    peers = {fit: np.load(work / f"{name}.{fit}.npy") for fit in PEERS[TABLES[name][0]]
             if (work / f"{name}.{fit}.npy").exists()}
    for fit, record in rows.items():
        mine = work / f"{name}.{fit}.npy"
        if fit in peers or not mine.exists():
            continue
        nll = np.load(mine)
        record["nll_minus_peer"] = {peer: {"difference": round(float(np.mean(nll - theirs)), 5),
                                           "standard_error": round(standard_error(nll - theirs), 5)}
                                    for peer, theirs in peers.items()}


def fits_of(task: str, asked: list[str] | None) -> list[str]:
    """The fits of a table of ``task``: its peers and pep's defaults, and the variants of :data:`OPTIONS` of its
    estimators that ``asked`` names; only those ``asked`` names when it names any."""
    fits = [*PEERS[task], *PEP_FITS[task]]
    fits += [fit for fit in asked or () if fit not in fits and OPTIONS.get(fit, ("",))[0] in PEP_FITS[task]]
    return [fit for fit in fits if not asked or fit in asked]


def cli() -> argparse.ArgumentParser:
    parser = arguments(__doc__, name="bench_everyday")
    parser.add_argument("--tables", nargs="+", choices=list(TABLES), default=list(TABLES))
    parser.add_argument("--fits", nargs="+", help="only these fits (estimator or peer names as in the JSON)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds a fit may take before it is stopped")
    parser.add_argument("--python", default=sys.executable, help="the interpreter every fit runs in")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    return parser


def main() -> None:
    args = cli().parse_args()
    if args.child:
        return child(args.child[0], args.child[1], Path(args.child[2]), float(args.child[3]))
    bytecode_compiled(args.python)
    has_gpytorch = importable(args.python, "gpytorch")
    results: dict = {"gflops_float64": gflops(), "load_at_start": uptime(), "python": args.python,
                     "gpytorch": has_gpytorch, "timeout_seconds": args.timeout, "tables": {}}
    with temporary_directory("pep-bench-everyday-") as work:
        for name in args.tables:
            task = TABLES[name][0]
            rows: dict = {}
            for index, fit in enumerate(fits_of(task, args.fits)):
                cache = work / f"compilation-cache-{name}-{index}"  # the fit's own: its first process finds it empty
                if fit.startswith("GPyTorch") and not has_gpytorch:
                    rows[fit] = {"ended": f"not run: {args.python} cannot import gpytorch (pip install -e '.[bench]')"}
                    continue
                first = launched(args.python, fit, name, work / f"{name}.{fit}.npy", cache, args.timeout)
                rows[fit] = {"first_process": first}
                if "ended" not in first:
                    rows[fit]["second_process"] = launched(args.python, fit, name, work / f"{name}.{fit}.second.npy",
                                                           cache, args.timeout)
                shown = first.get("seconds_to_fitted", first.get("ended"))
                print(f"{name:>14} {fit:<42} {shown} s, NLL {first.get('test_nll', float('nan')):.4f}", flush=True)
            compared({fit: record["first_process"] for fit, record in rows.items() if "first_process" in record},
                     work, name)
            results["tables"][name] = {"task": task, "fits": rows}
    results["load_at_end"] = uptime()
    results["machine"] = machine()
    write_results(args.name, results)


if __name__ == "__main__":
    main()
