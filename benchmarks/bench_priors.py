"""Priors on a small table (issue 65): where maximum likelihood over-fits a handful of rows, a prior on the
kernel's hyper-parameters changes the answer; pep's MAP fit beside GPyTorch's with the same priors, same rows.

The table: scikit-learn's diabetes (442 rows × 10 standardised inputs, disease progression after a year; ships
with scikit-learn). Each split draws ``--rows`` training rows at random (seed = split) and tests on all the
others, so that ten ARD lengthscales and a noise variance are learned from a few dozen rows, the regime where
type-II maximum likelihood drives lengthscales to extremes (Rasmussen & Williams 2006, §5.4.1) and a prior is
what GPflow and GPyTorch users reach for.

The model, the same in both libraries: a zero-mean GP on standardised inputs and targets (the training rows'
mean and standard deviation), an ARD squared exponential times a variance, Gaussian noise. The priors (a density
of the constrained value, GPflow's and GPyTorch's convention): lengthscales ``Gamma(3, 1.5)`` (mean 2 in units of
the inputs' standard deviation: BoTorch's Gamma(3, 6) on inputs scaled to [0, 1], whose range is about four
standard deviations) and the variance ``LogNormal(0, 1)``. The fits:

* pep: ``CollapsedGPRegressor`` (the collapsed PEP-α bound with inducing inputs at every training row, jitter
  0: the exact GP's evidence) at its defaults (L-BFGS), without and with the priors (``kernel=``);
* GPyTorch: ``ExactGP`` with ``ExactMarginalLogLikelihood`` (which adds the registered priors' log densities:
  a MAP fit), float64, Adam at 0.1 for 300 iterations as its tutorials train, without and with the priors.

Scores per fit and split: test NLL per row in the targets' units, RMSE, the fitted lengthscales' median and the
fraction of lengthscales above 20 (an input switched off); mean ± standard error over splits, and the paired
difference of the prior's fit to the fit without (per library).

Usage::

    python -m benchmarks.bench_priors [--splits 20] [--rows 24] [--name bench_priors]

Needs GPyTorch for its half (``pip install -e '.[bench]'``; without it pep's half runs alone).
"""

from __future__ import annotations

import importlib.util
import time
import warnings

import numpy as np

from ._common import arguments, standard_error, write_results

LENGTHSCALE_PRIOR = (3.0, 1.5)  # Gamma(shape, rate) on each lengthscale
VARIANCE_PRIOR = (0.0, 1.0)  # LogNormal(mean, sigma) on the kernel's variance
ADAM_ITERATIONS, ADAM_RATE = 300, 0.1
SWITCHED_OFF = 20.0  # a lengthscale above this many standard deviations of its input: the input ignored


def split(x, y, rows: int, seed: int):
    """``rows`` training rows drawn at random (``seed``) and every other row to test."""
    order = np.random.default_rng(seed).permutation(len(x))
    return x[order[:rows]], y[order[:rows]], x[order[rows:]], y[order[rows:]]


def scores(y_test, mean, std, lengthscales) -> dict:
    """Test NLL per row and RMSE (targets' units), and the fitted lengthscales' median and switched-off share."""
    from scipy import stats

    lengthscales = np.ravel(lengthscales)
    return {"nll": float(np.mean(-stats.norm.logpdf(y_test, mean, std))),
            "rmse": float(np.sqrt(np.mean((y_test - mean) ** 2))),
            "median_lengthscale": float(np.median(lengthscales)),
            "switched_off": float(np.mean(lengthscales > SWITCHED_OFF))}


def pep_fit(x_train, y_train, x_test, y_test, prior: bool) -> dict:
    from pep_gp import CollapsedGPRegressor
    from pep_gp.kernels import SquaredExponential
    from pep_gp.priors import Gamma, LogNormal

    priors = {"lengthscales": Gamma(*LENGTHSCALE_PRIOR), "variance": LogNormal(*VARIANCE_PRIOR)} if prior else None
    model = CollapsedGPRegressor(kernel=SquaredExponential(prior=priors), num_inducing=len(x_train), jitter=0.0)
    started = time.perf_counter()
    model.fit(x_train, y_train)
    seconds = time.perf_counter() - started
    mean, std = model.predict(x_test, return_std=True)
    return {**scores(y_test, mean, std, np.asarray(model.kernel_.lengthscales.value)), "seconds": round(seconds, 3)}


def gpytorch_fit(x_train, y_train, x_test, y_test, prior: bool) -> dict:
    import gpytorch
    import torch

    torch.manual_seed(0)
    x_mean, x_std = x_train.mean(0), x_train.std(0)
    y_mean, y_std = y_train.mean(), y_train.std()
    tensor = lambda a: torch.as_tensor(a, dtype=torch.float64)  # noqa: E731
    train_x, train_y = tensor((x_train - x_mean) / x_std), tensor((y_train - y_mean) / y_std)
    test_x = tensor((x_test - x_mean) / x_std)
    lengthscale_prior = gpytorch.priors.GammaPrior(*LENGTHSCALE_PRIOR) if prior else None
    variance_prior = gpytorch.priors.LogNormalPrior(*VARIANCE_PRIOR) if prior else None

    class GP(gpytorch.models.ExactGP):
        def __init__(self, likelihood):
            super().__init__(train_x, train_y, likelihood)
            self.mean_module = gpytorch.means.ZeroMean()
            self.covar_module = gpytorch.kernels.ScaleKernel(
                gpytorch.kernels.RBFKernel(ard_num_dims=train_x.shape[1], lengthscale_prior=lengthscale_prior),
                outputscale_prior=variance_prior)

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))

    likelihood = gpytorch.likelihoods.GaussianLikelihood().double()
    model = GP(likelihood).double()
    started = time.perf_counter()
    model.train(), likelihood.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=ADAM_RATE)
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(likelihood, model)
    for _ in range(ADAM_ITERATIONS):
        optimizer.zero_grad()
        loss = -mll(model(train_x), train_y)
        loss.backward()
        optimizer.step()
    seconds = time.perf_counter() - started
    model.eval(), likelihood.eval()
    with torch.no_grad():
        predictive = likelihood(model(test_x))
        mean = predictive.mean.numpy() * y_std + y_mean
        std = np.sqrt(predictive.variance.numpy()) * y_std
    lengthscales = model.covar_module.base_kernel.lengthscale.detach().numpy()
    return {**scores(y_test, mean, std, lengthscales), "seconds": round(seconds, 3)}


def summary(runs: list[dict]) -> dict:
    """Mean ± standard error over splits of each score."""
    return {key: {"mean": float(np.mean([r[key] for r in runs])), "se": standard_error([r[key] for r in runs])}
            for key in runs[0]}


def paired(with_prior: list[dict], without: list[dict], key: str) -> dict:
    differences = [a[key] - b[key] for a, b in zip(with_prior, without)]
    return {"mean": float(np.mean(differences)), "se": standard_error(differences)}


def table(result: dict) -> str:
    """The docs table of a run: each fit's scores, mean ± standard error over splits, and the prior's paired change
    (the seconds per fit are in the JSON: this benchmark is about the answer, and ran on a loaded machine)."""
    def cell(score: dict, digits: int) -> str:
        return f"{score['mean']:.{digits}f} ± {score['se']:.{digits}f}"

    lines = ["| fit | test NLL | RMSE | median lengthscale, median over splits | lengthscales > 20 |",
             "|---|---|---|---|---|"]
    for name, fit in result["fits"].items():
        median = np.median([run["median_lengthscale"] for run in result["per_split"][name]])
        lines.append(f"| {name} | {cell(fit['nll'], 3)} | {cell(fit['rmse'], 1)} | {median:.3g} "
                     f"| {fit['switched_off']['mean']:.0%} |")
    for library, change in result["prior_minus_ml"].items():
        lines.append(f"| {library}: priors − ML-II, paired | {cell(change['nll'], 3)} | {cell(change['rmse'], 1)} | | |")
    return "\n".join(lines)


def cli():
    parser = arguments(__doc__, name="bench_priors", splits=20)
    parser.add_argument("--rows", type=int, default=24, help="training rows per split (default: %(default)s)")
    return parser


def main() -> None:
    args = cli().parse_args()
    from sklearn.datasets import load_diabetes

    x, y = load_diabetes(return_X_y=True)
    libraries = {"pep": pep_fit, **({"GPyTorch": gpytorch_fit} if importlib.util.find_spec("gpytorch") else {})}
    runs = {f"{library} {kind}": [] for library in libraries for kind in ("ML-II", "MAP (priors)")}
    for seed in range(args.splits):
        parts = split(x, y, args.rows, seed)
        for library, fit in libraries.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                runs[f"{library} ML-II"].append(fit(*parts, prior=False))
                runs[f"{library} MAP (priors)"].append(fit(*parts, prior=True))
        print(f"split {seed}: " + ", ".join(f"{name} NLL {r[-1]['nll']:.3f}" for name, r in runs.items()), flush=True)
    results = {"table": "diabetes (scikit-learn)", "training_rows": args.rows, "test_rows": len(x) - args.rows,
               "splits": args.splits, "lengthscale_prior": {"gamma": LENGTHSCALE_PRIOR},
               "variance_prior": {"log-normal": VARIANCE_PRIOR},
               "gpytorch_training": {"optimizer": "Adam", "rate": ADAM_RATE, "iterations": ADAM_ITERATIONS},
               "fits": {name: summary(r) for name, r in runs.items()},
               "prior_minus_ml": {library: {key: paired(runs[f"{library} MAP (priors)"], runs[f"{library} ML-II"], key)
                                            for key in ("nll", "rmse")} for library in libraries},
               "per_split": runs}
    write_results(args.name, results)
    print(table(results))


if __name__ == "__main__":
    main()
