"""Ordinal regression on a real table: pep's OrdinalGPClassifier (a sparse GP through the ordinal probit with
learned cut points, Chu & Ghahramani 2005) beside scikit-learn's multinomial LogisticRegression (which ignores
the order) and GPflow's SVGP with its ``Ordinal`` likelihood (whose bin edges are fixed, a common scale σ
learned; its outer edges made finite, see :func:`gpflow_worker`), on the same random 80/20 splits of pscl's ``politicalInformation`` (1,790 interviews, 5 ordered
ratings, 6 inputs).

Each fit is scored on its test rows by the mean negative log probability of the true class (NLL), the error
rate of the most probable class, and its mean absolute error in classes (MAE, the rating's scale). GPflow
runs in a Python that has it (``--gpflow-python``: a virtual environment with ``gpflow`` and
``tensorflow-cpu``), in a child process given the same split; without one its rows say why not.

    python -m benchmarks.bench_ordinal --splits 5 --gpflow-python PATH/TO/python
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from benchmarks import _gpflow
from benchmarks._common import arguments, read_results, temporary_directory, write_results

NAME = "bench_ordinal"
DATASET = "political-information"


def cli():
    """The command line of ``python -m benchmarks.bench_ordinal``."""
    parser = arguments(__doc__, name=NAME, splits=5, steps=500)
    parser.add_argument("--num-inducing", type=int, default=50, help="inducing points M (default: %(default)s)")
    return _gpflow.add_options(parser)


def scores(proba: np.ndarray, y: np.ndarray) -> dict:
    """Test NLL (mean −log p of the true class), error rate and MAE (in classes) of the most probable class."""
    predicted = np.argmax(proba, axis=1)
    return {"nll": float(-np.mean(np.log(np.maximum(proba[np.arange(y.size), y], 1e-300)))),
            "error": float(np.mean(predicted != y)), "mae": float(np.mean(np.abs(predicted - y)))}


def starting_edges(y: np.ndarray, n_classes: int) -> np.ndarray:
    """pep's starting cut points (:meth:`pep_gp.core.ordinal.Ordinal.init_params`): ``√2 Φ⁻¹`` of the labels'
    cumulative frequencies, counts raised by ½."""
    from scipy.special import ndtri

    counts = np.bincount(y, minlength=n_classes) + 0.5
    return np.sqrt(2.0) * ndtri(np.cumsum(counts)[:-1] / counts.sum())


def fit_pep(x_train, y_train, x_test, settings: dict) -> tuple[np.ndarray, dict]:
    from pep_gp import OrdinalGPClassifier

    model = OrdinalGPClassifier(**settings).fit(x_train, y_train)
    return model.predict_proba(x_test), {"n_iter": int(model.n_iter_), "converged": bool(model.converged_),
                                         "cut_points": model.cut_points_.tolist()}


def fit_logistic(x_train, y_train, x_test) -> tuple[np.ndarray, dict]:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)).fit(x_train, y_train)
    return model.predict_proba(x_test), {}


def gpflow_worker(path: str) -> None:
    """In the GPflow process: fit SVGP with ``gpflow.likelihoods.Ordinal`` (ARD squared exponential, ``M``
    inducing inputs at k-means centres of the standardised training inputs, edges at pep's start, L-BFGS on
    the ELBO) on the split in ``path`` and write the test rows' class probabilities beside it:
    ``Φ((b_k − m)/√(σ² + v)) − Φ((b_{k−1} − m)/√(σ² + v))`` of its latent ``(m, v)``."""
    import gpflow
    import tensorflow as tf
    from gpflow.likelihoods.utils import inv_probit
    from scipy.cluster.vq import kmeans2
    from scipy.special import ndtr

    class Ordinal(gpflow.likelihoods.Ordinal):
        """GPflow's ``Ordinal`` with its outer edges at ±1,000 instead of ±∞: TensorFlow 2.21's float64
        ``erf(±∞)`` is NaN (``erf(±1000)`` is ±1), which made the lowest and the highest label's log probability,
        and so the ELBO, NaN from the start (L-BFGS stopped at iteration 0)."""

        def _scalar_log_prob(self, X, F, Y):
            Y = tf.cast(Y, tf.int64)
            scaled = self.bin_edges / self.sigma
            left = tf.gather(tf.concat([scaled, np.array([1e3])], 0), Y)
            right = tf.gather(tf.concat([np.array([-1e3]), scaled], 0), Y)
            return tf.math.log(inv_probit(left - F / self.sigma) - inv_probit(right - F / self.sigma) + 1e-6)

    data = np.load(path)
    x, y, x_test = data["x_train"], data["y_train"].astype(np.int64), data["x_test"]
    mean, std = x.mean(0), x.std(0)
    x, x_test = (x - mean) / std, (x_test - mean) / std
    n_classes, m = int(data["n_classes"]), int(data["num_inducing"])
    edges = starting_edges(y, n_classes)
    tf.random.set_seed(int(data["seed"]))
    z = kmeans2(x, m, seed=int(data["seed"]), minit="++")[0]
    model = gpflow.models.SVGP(gpflow.kernels.SquaredExponential(lengthscales=np.ones(x.shape[1])),
                               Ordinal(edges), z, num_data=x.shape[0])
    start = time.perf_counter()
    result = gpflow.optimizers.Scipy().minimize(model.training_loss_closure((x, y[:, None].astype(np.float64))),
                                                model.trainable_variables, options={"maxiter": int(data["steps"])})
    seconds = time.perf_counter() - start
    f_mean, f_var = (a.numpy()[:, 0] for a in model.predict_f(x_test))
    scale = np.sqrt(model.likelihood.sigma.numpy() ** 2 + f_var)
    bounds = np.concatenate([[-np.inf], edges, [np.inf]])
    cdf = ndtr((bounds[None, :] - f_mean[:, None]) / scale[:, None])
    np.savez(Path(path).with_suffix(".out.npz"), proba=np.diff(cdf, axis=1), seconds=seconds,
             iterations=int(result.nit), sigma=float(model.likelihood.sigma.numpy()))


def fit_gpflow(python: str, directory: Path, x_train, y_train, x_test, n_classes, num_inducing, steps, seed):
    out = _gpflow.run_worker(python, "benchmarks.bench_ordinal", directory / f"split{seed}.npz", x_train=x_train,
                             y_train=y_train, x_test=x_test, n_classes=n_classes, num_inducing=num_inducing,
                             steps=steps, seed=seed)
    return out["proba"], {"seconds_in_gpflow": float(out["seconds"]), "n_iter": int(out["iterations"]),
                          "sigma": float(out["sigma"])}


def table(result: dict) -> str:
    """Markdown: each method's mean test NLL, error, MAE and seconds per fit over the splits (± one standard error)."""
    def cell(stat: dict, digits: int) -> str:
        return f"{stat['mean']:.{digits}f}" + ("" if stat["se"] is None else f" ± {stat['se']:.{digits}f}")

    lines = [f"| method ({result['splits']} splits of {result['dataset']['rows']:,} rows) | test NLL | error | MAE "
             "(classes) | seconds per fit |", "|---|---|---|---|---|"]
    for method, stats in result["summary"].items():
        lines.append(f"| {method} | {cell(stats['nll'], 4)} | {cell(stats['error'], 3)} | {cell(stats['mae'], 3)} "
                     f"| {cell(stats['seconds'], 1)} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    args = cli().parse_args(argv)
    if args.gpflow_worker is not None:
        return gpflow_worker(args.gpflow_worker)
    from sklearn.model_selection import train_test_split

    from benchmarks.datasets import load

    data = load(DATASET)
    n_classes = len(data.classes)
    pep_settings = {"num_inducing": args.num_inducing, "ard": True, "max_iter": args.steps}
    gpflow = None if args.gpflow_python is None else _gpflow.version(args.gpflow_python)
    fits = []
    with temporary_directory() as directory:
        for split in range(args.splits):
            x_train, x_test, y_train, y_test = train_test_split(data.x, data.y, test_size=0.2, random_state=split,
                                                                stratify=data.y)
            runs = {"pep": lambda: fit_pep(x_train, y_train, x_test, {**pep_settings, "seed": split}),
                    "sklearn-logistic": lambda: fit_logistic(x_train, y_train, x_test)}
            if gpflow is not None:
                runs["gpflow-svgp-ordinal"] = lambda: fit_gpflow(args.gpflow_python, directory, x_train, y_train,
                                                                 x_test, n_classes, args.num_inducing, args.steps, split)
            for method, run in runs.items():
                start = time.perf_counter()
                proba, extra = run()
                seconds = time.perf_counter() - start
                fits.append({"split": split, "method": method, "seconds": round(seconds, 2),
                             **scores(proba, y_test), **extra})
                print(fits[-1], file=sys.stderr)
    summary = {}
    for method in dict.fromkeys(fit["method"] for fit in fits):
        rows = [fit for fit in fits if fit["method"] == method]
        summary[method] = {metric: {"mean": float(np.mean([r[metric] for r in rows])),
                                    "se": float(np.std([r[metric] for r in rows], ddof=1) / np.sqrt(len(rows)))
                                    if len(rows) > 1 else None}
                           for metric in ("nll", "error", "mae", "seconds")}
    write_results(args.name, {
        "dataset": {"name": DATASET, "source": data.source, "rows": int(data.x.shape[0]), "features": list(data.feature_names),
                    "classes": list(data.classes), "notes": data.notes},
        "splits": args.splits, "test_fraction": 0.2, "pep_settings": pep_settings,
        "gpflow": gpflow or f"not run: {'no --gpflow-python given' if args.gpflow_python is None else 'gpflow not importable in ' + args.gpflow_python}",
        "gpflow_settings": {"model": "SVGP", "kernel": "SquaredExponential (ARD)", "num_inducing": args.num_inducing,
                            "inducing": "k-means centres", "optimizer": "Scipy L-BFGS", "maxiter": args.steps,
                            "bin_edges": "fixed at pep's starting cut points (GPflow's Ordinal learns only σ)"},
        "summary": summary, "fits": fits})
    print(table(read_results(args.name)))


if __name__ == "__main__":
    main()
