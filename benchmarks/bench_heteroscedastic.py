"""Heteroscedastic regression on a real table: pep's HeteroscedasticGPRegressor (a sparse GP for the mean and one
for the log noise variance, Lázaro-Gredilla & Titsias 2011) beside pep's homoscedastic SparseGPRegressor and
GPflow's SVGP with two latent GPs and ``HeteroskedasticTFPConditional`` (a Normal whose scale is ``exp`` of the
second GP), on the same random 80/20 splits of MASS ``mcycle`` (133 head accelerations against time after a
simulated motorcycle impact, Silverman 1985: a noise that grows from near zero to large after the impact).

Each fit is scored on its test rows by the mean negative log predictive density (NLL), the RMSE of the predictive
mean, and the share of test targets inside the central 90 % interval of its own predictive (coverage). GPflow
runs in a Python that has it (``--gpflow-python``: a virtual environment with ``gpflow`` and
``tensorflow-cpu``), in a child process given the same split; without one its rows say why not.

    python -m benchmarks.bench_heteroscedastic --splits 5 --gpflow-python PATH/TO/python
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from benchmarks import _gpflow
from benchmarks._common import arguments, read_results, temporary_directory, write_results

NAME = "bench_heteroscedastic"
DATASET = "mcycle"


def cli():
    """The command line of ``python -m benchmarks.bench_heteroscedastic``."""
    parser = arguments(__doc__, name=NAME, splits=5, steps=1000)
    parser.add_argument("--num-inducing", type=int, default=20, help="inducing points M (default: %(default)s)")
    return _gpflow.add_options(parser)


def fit_pep(estimator: str, x_train, y_train, x_test, y_test, settings: dict) -> dict:
    import pep_gp

    model = getattr(pep_gp, estimator)(**settings).fit(x_train, y_train)
    report = model.calibration_report(x_test, y_test)
    return {"nll": report["test_nll"], "rmse": report["rmse"], "coverage_90": report["coverage_90"],
            "n_iter": int(model.n_iter_)}


def gpflow_worker(path: str) -> None:
    """In the GPflow process: fit SVGP with two latent GPs (squared exponential each, ``M`` inducing inputs at
    k-means centres of the standardised inputs for both) and ``HeteroskedasticTFPConditional`` (Normal, scale
    ``exp(g)``) by L-BFGS on the ELBO, on standardised targets, and write the test rows' scores: NLL of
    ``predict_log_density``, RMSE of the mean, and the 90 % coverage of the mixture over ``g`` (its CDF at each
    target by 2,000 draws of ``g``)."""
    import gpflow
    import tensorflow as tf
    import tensorflow_probability as tfp
    from scipy.cluster.vq import kmeans2
    from scipy.special import ndtr

    data = np.load(path)
    x, y, x_test, y_test = data["x_train"], data["y_train"], data["x_test"], data["y_test"]
    x_mean, x_std, y_mean, y_std = x.mean(0), x.std(0), y.mean(), y.std()
    x, x_test = (x - x_mean) / x_std, (x_test - x_mean) / x_std
    y = (y - y_mean) / y_std
    tf.random.set_seed(int(data["seed"]))
    z = kmeans2(x, int(data["num_inducing"]), seed=int(data["seed"]), minit="++")[0]
    likelihood = gpflow.likelihoods.HeteroskedasticTFPConditional(
        distribution_class=tfp.distributions.Normal, scale_transform=tfp.bijectors.Exp())
    kernel = gpflow.kernels.SeparateIndependent([gpflow.kernels.SquaredExponential(),
                                                 gpflow.kernels.SquaredExponential()])
    inducing = gpflow.inducing_variables.SeparateIndependentInducingVariables(
        [gpflow.inducing_variables.InducingPoints(z.copy()), gpflow.inducing_variables.InducingPoints(z.copy())])
    model = gpflow.models.SVGP(kernel, likelihood, inducing, num_latent_gps=likelihood.latent_dim,
                               num_data=x.shape[0])
    start = time.perf_counter()
    result = gpflow.optimizers.Scipy().minimize(model.training_loss_closure((x, y[:, None])),
                                                model.trainable_variables, options={"maxiter": int(data["steps"])})
    seconds = time.perf_counter() - start
    y_scaled = (y_test - y_mean) / y_std
    log_density = model.predict_log_density((x_test, y_scaled[:, None])).numpy() - np.log(y_std)
    f_mean, f_var = (a.numpy() for a in model.predict_f(x_test))  # [n, 2]
    g = f_mean[:, 1] + np.sqrt(f_var[:, 1]) * np.random.default_rng(0).standard_normal((2000, 1))
    cdf = np.mean(ndtr((y_scaled - f_mean[:, 0]) / np.sqrt(f_var[:, 0] + np.exp(2.0 * g))), axis=0)
    np.savez(Path(path).with_suffix(".out.npz"), nll=-np.mean(log_density),
             rmse=np.sqrt(np.mean((f_mean[:, 0] * y_std + y_mean - y_test) ** 2)),
             coverage=np.mean((cdf >= 0.05) & (cdf <= 0.95)), seconds=seconds, iterations=int(result.nit))


def fit_gpflow(python: str, directory: Path, x_train, y_train, x_test, y_test, num_inducing, steps, seed) -> dict:
    out = _gpflow.run_worker(python, "benchmarks.bench_heteroscedastic", directory / f"split{seed}.npz",
                             x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test,
                             num_inducing=num_inducing, steps=steps, seed=seed)
    return {"nll": float(out["nll"]), "rmse": float(out["rmse"]), "coverage_90": float(out["coverage"]),
            "n_iter": int(out["iterations"]), "seconds_in_gpflow": float(out["seconds"])}


def table(result: dict) -> str:
    """Markdown: each method's mean test NLL, RMSE, 90 % coverage and seconds per fit (± one standard error)."""
    def cell(stat: dict, digits: int) -> str:
        return f"{stat['mean']:.{digits}f}" + ("" if stat["se"] is None else f" ± {stat['se']:.{digits}f}")

    lines = [f"| method ({result['splits']} splits of {result['dataset']['rows']:,} rows) | test NLL | RMSE (g) "
             "| 90 % coverage | seconds per fit |", "|---|---|---|---|---|"]
    for method, stats in result["summary"].items():
        lines.append(f"| {method} | {cell(stats['nll'], 3)} | {cell(stats['rmse'], 2)} "
                     f"| {cell(stats['coverage_90'], 3)} | {cell(stats['seconds'], 1)} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    args = cli().parse_args(argv)
    if args.gpflow_worker is not None:
        return gpflow_worker(args.gpflow_worker)
    from sklearn.model_selection import train_test_split

    from benchmarks.datasets import load

    data = load(DATASET)
    pep_settings = {"num_inducing": args.num_inducing, "max_iter": args.steps}
    gpflow = None if args.gpflow_python is None else _gpflow.version(args.gpflow_python)
    fits = []
    with temporary_directory() as directory:
        for split in range(args.splits):
            x_train, x_test, y_train, y_test = train_test_split(data.x, data.y, test_size=0.2, random_state=split)
            runs = {"pep-heteroscedastic": lambda: fit_pep("HeteroscedasticGPRegressor", x_train, y_train, x_test,
                                                           y_test, {**pep_settings, "seed": split}),
                    "pep-sparse-gp": lambda: fit_pep("SparseGPRegressor", x_train, y_train, x_test, y_test,
                                                     {**pep_settings, "seed": split})}
            if gpflow is not None:
                runs["gpflow-svgp-heteroscedastic"] = lambda: fit_gpflow(args.gpflow_python, directory, x_train,
                                                                         y_train, x_test, y_test, args.num_inducing,
                                                                         args.steps, split)
            for method, run in runs.items():
                start = time.perf_counter()
                extra = run()
                fits.append({"split": split, "method": method, "seconds": round(time.perf_counter() - start, 2),
                             **extra})
                print(fits[-1], file=sys.stderr)
    summary = {}
    for method in dict.fromkeys(fit["method"] for fit in fits):
        rows = [fit for fit in fits if fit["method"] == method]
        summary[method] = {metric: {"mean": float(np.mean([r[metric] for r in rows])),
                                    "se": float(np.std([r[metric] for r in rows], ddof=1) / np.sqrt(len(rows)))
                                    if len(rows) > 1 else None}
                           for metric in ("nll", "rmse", "coverage_90", "seconds")}
    write_results(args.name, {
        "dataset": {"name": DATASET, "source": data.source, "rows": int(data.x.shape[0]),
                    "features": list(data.feature_names), "notes": data.notes},
        "splits": args.splits, "test_fraction": 0.2, "pep_settings": pep_settings,
        "gpflow": gpflow or f"not run: {'no --gpflow-python given' if args.gpflow_python is None else 'gpflow not importable in ' + args.gpflow_python}",
        "gpflow_settings": {"model": "SVGP, two latent GPs", "likelihood": "HeteroskedasticTFPConditional (Normal, "
                            "scale exp(g))", "kernel": "SquaredExponential each", "num_inducing": args.num_inducing,
                            "inducing": "k-means centres", "optimizer": "Scipy L-BFGS", "maxiter": args.steps},
        "summary": summary, "fits": fits})
    print(table(read_results(args.name)))


if __name__ == "__main__":
    main()
