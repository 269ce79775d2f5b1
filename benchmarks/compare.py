"""pep against GPyTorch on Fashion-MNIST or the 3-class airline delays, side by side in one run (issue 13).

Both models see the same rows (Fashion-MNIST: pixels / 255, no per-pixel standardisation; airline: inputs
standardised with the training split's statistics), the same number of inducing inputs per class and the
same minibatch, for the same number of epochs, one after the other in this process:

* pep: ``multiclass-sep`` through the trainer that ``pep train`` runs (``--cluster`` chooses the backend),
  float64 (``--kernel-products float32``: the kernel's matrix products over the inputs in float32, the EP
  algebra still float64); on Fashion-MNIST at Villacampa-Calvo & Hernández-Lobato's (2017) MNIST settings (M = 200 per class, Adam with step
  1e-3, undamped tied-factor updates, α = 1), on the airline at :data:`benchmarks.bench_airline_multiclass.AIRLINE_SEP`
  (M = 200, cosine Adam 0.05, 2,500-row blocks).
* GPyTorch: the SVGP of its multi-class example — C = 10 independent latent GPs
  (``IndependentMultitaskVariationalStrategy``), each with its own ARD RBF kernel, constant mean and M
  learned inducing inputs started at random training rows, ``SoftmaxLikelihood`` without mixing, the
  ELBO, Adam with step 0.01; float32, as GPyTorch users run it. Its lengthscales start where pep's do
  (ℓ² = the median distance between rows): from GPyTorch's default ℓ = 0.69 every kernel value between
  images is ~0 and it stays at chance for hundreds of steps (measured: 2.302 after 80 steps).
* logistic regression (scikit-learn, to convergence) and the class frequencies, for scale.

Per epoch: the seconds spent in training steps only (evaluation excluded, as Villacampa-Calvo & Hernández-Lobato 2017, §4.4), the
cumulative seconds, test error and test NLL. The summary gives pep's seconds per epoch over GPyTorch's
(the mean over epochs, whose first holds pep's compilation, and the last epoch alone) and the training
seconds each needed to reach GPyTorch's final test NLL.

Usage::

    .venv/bin/python -m benchmarks.compare [--data fashion-mnist] [--epochs 4] [--batch-sizes 200 2000]
        [--max-train-rows N] [--mnist-dir /usr/share/datasets/fashion-mnist] [--cluster none]
        [--torch-device cpu] [--kernel-products float64] [--name compare] [--no-baselines]
    .venv/bin/python -m benchmarks.compare --data airline --epochs 3 --batch-sizes 10000 --name compare_airline

Needs the ``bench`` extra (torch CPU, gpytorch). Writes ``benchmarks/results/NAME.json`` and
``NAME.png`` (test NLL against training seconds) and prints the results page's table (:func:`table`; a test
checks that docs/results/gpytorch.md holds those of the committed JSON files).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

from benchmarks._common import RESULTS, arguments, temporary_directory, write_results
from benchmarks._multiclass_run import airline_classes, baselines, run_sep
from benchmarks.bench_airline_multiclass import AIRLINE_SEP
from benchmarks.bench_fashion_mnist import PAPER_MNIST, fashion_mnist_store
from pep_gp.core.initialisation import squared_median_lengthscale
from pep_gp.core.kernels import PRODUCT_DTYPES
from pep_gp.pipeline.data.blocks import input_statistics
from pep_gp.pipeline.data.sources.mnist import DEBIAN_DIR
from pep_gp.pipeline.data.stores import Store, open_store
from pep_gp.pipeline.runs.config import TrainConfig
from pep_gp.pipeline.engine.cache import block_cache_budget

GPYTORCH_LEARNING_RATE = 0.01
EVALUATION_ROWS = 2000  # test rows per GPyTorch prediction call


class Dataset(NamedTuple):
    """A comparison's data: its name in reports, pep's settings, and whether a step is one block (else
    blocks of the settings' ``block_rows``, at most the step)."""

    name: str
    settings: TrainConfig
    one_block_per_step: bool


DATASETS = {"fashion-mnist": Dataset("Fashion-MNIST", PAPER_MNIST, True),
            "airline": Dataset("airline 2013, 3 classes", AIRLINE_SEP, False)}


def _arrays(store: Store, standardize: bool):
    """``(x, y, x_test, y_test)`` of the store pep trains on, as pep sees them (standardised with the
    training statistics when ``standardize``): float32 inputs, int64 labels."""
    mean, std = (np.asarray(v) for v in input_statistics(store.attrs, standardize))
    (x, y), (x_test, y_test) = ((a[:], b[:]) for a, b in map(store.arrays, ("train", "test")))
    scaled = lambda inputs: ((inputs - mean) / std).astype(np.float32)
    return scaled(x), y.astype(np.int64), scaled(x_test), y_test.astype(np.int64)


def _config(dataset: Dataset, epochs: int, batch: int, kernel_products: str) -> TrainConfig:
    """pep's settings on ``dataset`` for ``epochs`` epochs of ``batch``-row steps, with the kernel's
    products over the inputs in ``kernel_products`` (``multiclass-sep``'s setting)."""
    block_rows = batch if dataset.one_block_per_step else min(batch, dataset.settings.block_rows)
    model = {**dataset.settings.model, "kernel_products": kernel_products}
    return dataset.settings.model_copy(update={"epochs": epochs, "batch_size": batch, "block_rows": block_rows,
                                               "model": model})


class GPyTorchSVGP(NamedTuple):
    """GPyTorch's multi-class SVGP (module docstring), ready to train: its model, likelihood, ELBO and Adam,
    and the generator that drew its inducing inputs (the epochs' row orders continue it)."""

    model: object
    likelihood: object
    objective: object
    optimiser: object
    rng: np.random.Generator

    def step(self, x, y) -> None:
        """One Adam step on the negative ELBO of the rows ``x`` ``[B, D]`` with labels ``y`` ``[B]`` (tensors)."""
        self.optimiser.zero_grad()
        loss = -self.objective(self.model(x), y)
        loss.backward()
        self.optimiser.step()


def gpytorch_svgp(x, y, num_inducing: int, seed: int = 0, device: str = "cpu") -> GPyTorchSVGP:
    """GPyTorch's multi-class SVGP (module docstring) for the training rows ``x`` and labels ``y`` on the torch
    ``device``: its inducing inputs are rows drawn at random (``seed``), its lengthscales pep's start."""
    import gpytorch
    import torch

    torch.manual_seed(seed)
    classes, dim = int(y.max()) + 1, x.shape[1]

    class SVGP(gpytorch.models.ApproximateGP):
        def __init__(self, inducing):
            distribution = gpytorch.variational.CholeskyVariationalDistribution(
                num_inducing, batch_shape=torch.Size([classes]))
            strategy = gpytorch.variational.IndependentMultitaskVariationalStrategy(
                gpytorch.variational.VariationalStrategy(self, inducing, distribution, learn_inducing_locations=True),
                num_tasks=classes)
            super().__init__(strategy)
            self.mean_module = gpytorch.means.ConstantMean(batch_shape=torch.Size([classes]))
            self.covar_module = gpytorch.kernels.ScaleKernel(
                gpytorch.kernels.RBFKernel(batch_shape=torch.Size([classes]), ard_num_dims=dim),
                batch_shape=torch.Size([classes]))

        def forward(self, inputs):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(inputs), self.covar_module(inputs))

    rng = np.random.default_rng(seed)
    starts = np.stack([x[rng.choice(len(x), num_inducing, replace=False)] for _ in range(classes)])
    model = SVGP(torch.from_numpy(starts))
    model.covar_module.base_kernel.lengthscale = squared_median_lengthscale(x, seed)  # pep's start (Villacampa-Calvo & Hernández-Lobato 2017, §4.4)
    likelihood = gpytorch.likelihoods.SoftmaxLikelihood(num_classes=classes, mixing_weights=False)
    model, likelihood = model.to(torch.device(device)), likelihood.to(torch.device(device))
    objective = gpytorch.mlls.VariationalELBO(likelihood, model, num_data=len(x))
    optimiser = torch.optim.Adam([*model.parameters(), *likelihood.parameters()], lr=GPYTORCH_LEARNING_RATE)
    return GPyTorchSVGP(model, likelihood, objective, optimiser, rng)


def run_gpytorch(x, y, x_test, y_test, num_inducing: int, batch_size: int, epochs: int, seed: int = 0,
                 device: str = "cpu") -> dict:
    """GPyTorch's multi-class SVGP (:func:`gpytorch_svgp`) on the torch ``device``: per-epoch training seconds,
    test error and NLL."""
    import gpytorch
    import torch

    on_device = torch.device(device)
    svgp = gpytorch_svgp(x, y, num_inducing, seed, device)
    model, likelihood, rng = svgp.model, svgp.likelihood, svgp.rng
    train_x, train_y = torch.from_numpy(x).to(on_device), torch.from_numpy(y).to(on_device)
    records, seconds = [], 0.0
    for epoch in range(1, epochs + 1):
        model.train(), likelihood.train()
        order = torch.from_numpy(rng.permutation(len(x)))
        started = time.perf_counter()
        for start in range(0, len(x), batch_size):
            rows = order[start:start + batch_size].to(on_device)
            svgp.step(train_x[rows], train_y[rows])
        if on_device.type == "cuda":
            torch.cuda.synchronize()
        seconds += time.perf_counter() - started
        model.eval(), likelihood.eval()
        with torch.no_grad():
            proba = np.concatenate([
                likelihood(model(torch.from_numpy(x_test[i:i + EVALUATION_ROWS]).to(on_device))).probs.mean(0).cpu().numpy()
                for i in range(0, len(x_test), EVALUATION_ROWS)])
        picked = np.clip(proba[np.arange(len(y_test)), y_test], 1e-300, None)
        records.append({"epoch": epoch, "training_seconds": round(seconds, 2),
                        "test_error": float(np.mean(proba.argmax(1) != y_test)),
                        "test_nll": float(-np.mean(np.log(picked)))})
        print({"gpytorch": records[-1]}, flush=True)
    return {"per_epoch": records, "seconds_per_epoch": round(seconds / epochs, 2), "learning_rate": GPYTORCH_LEARNING_RATE,
            "dtype": "float32", "torch_threads": torch.get_num_threads(), "device": device,
            "torch": torch.__version__, "gpytorch": gpytorch.__version__}


def seconds_to_reach(per_epoch: list[dict], nll: float) -> float | None:
    """Training seconds at the first epoch whose test NLL is at most ``nll`` (None: never)."""
    return next((r["training_seconds"] for r in per_epoch if r["test_nll"] <= nll), None)


def last_epoch_seconds(per_epoch: list[dict]) -> float:
    """Training seconds of the last epoch alone (pep's first epoch also holds its compilation)."""
    cumulative = [0.0] + [r["training_seconds"] for r in per_epoch]
    return cumulative[-1] - cumulative[-2]


def summary(pep: dict, gpytorch: dict) -> dict:
    """pep's seconds per epoch over GPyTorch's (mean over epochs, and the last epoch alone) and the training
    seconds each took to reach GPyTorch's final test NLL."""
    target = gpytorch["per_epoch"][-1]["test_nll"]
    return {"pep_over_gpytorch_seconds_per_epoch": round(pep["seconds_per_epoch"] / gpytorch["seconds_per_epoch"], 3),
            "pep_over_gpytorch_last_epoch": round(last_epoch_seconds(pep["per_epoch"])
                                                  / last_epoch_seconds(gpytorch["per_epoch"]), 3),
            "gpytorch_final_test_nll": target,
            "seconds_to_gpytorch_final_nll": {"pep": seconds_to_reach(pep["per_epoch"], target),
                                              "gpytorch": gpytorch["per_epoch"][-1]["training_seconds"]}}


def table(payload: dict) -> str:
    """The results page's table of one run (``benchmarks/results/NAME.json``): per minibatch, training seconds of
    pep's and GPyTorch's first and last epochs, pep's last epoch over GPyTorch's, both models' test error
    and NLL after the last epoch and the seconds each took to reach GPyTorch's final NLL."""
    machine = payload["machine"]
    products = payload.get("kernel_products", "float64")
    lines = [f"{payload['dataset']}, {', '.join(machine['devices'])}, JAX {machine['jax']}, "
             f"block cache {payload['block_cache_mb']:g} MB, "
             + ("" if products == "float64" else f"pep's kernel products in {products}, ") +
             f"{payload['epochs']} epochs, {payload['n_train']:,} / {payload['n_test']:,} rows:", "",
             "| minibatch | pep s, epoch 1 / last | GPyTorch s, epoch 1 / last | pep / GPyTorch, last epoch "
             "| pep error / NLL | GPyTorch error / NLL | s to GPyTorch's final NLL, pep / GPyTorch |",
             "|---|---|---|---|---|---|---|"]
    for batch, run in payload["runs"].items():
        cells = [f"{int(batch):,}"]
        for name in ("pep", "gpytorch"):
            first = run[name]["per_epoch"][0]["training_seconds"]
            cells.append(f"{first:.2f} / {last_epoch_seconds(run[name]['per_epoch']):.2f}")
        cells.append(f"{run['summary']['pep_over_gpytorch_last_epoch']:.2f}")
        for name in ("pep", "gpytorch"):
            final = run[name]["per_epoch"][-1]
            cells.append(f"{100 * final['test_error']:.1f} % / {final['test_nll']:.3f}")
        reach = run["summary"]["seconds_to_gpytorch_final_nll"]
        cells.append(" / ".join("never" if reach[name] is None else f"{reach[name]:.2f}" for name in ("pep", "gpytorch")))
        lines.append(f"| {' | '.join(cells)} |")
    return "\n".join(lines)


def plot(runs: dict, path: Path) -> None:
    """Test NLL against cumulative training seconds, one panel per minibatch size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(runs), figsize=(5 * len(runs), 4), squeeze=False)
    for axis, (batch, run) in zip(axes[0], runs.items()):
        for name in ("pep", "gpytorch"):
            records = run[name]["per_epoch"]
            axis.plot([r["training_seconds"] for r in records], [r["test_nll"] for r in records], "o-", label=name)
        axis.set(title=f"minibatch {batch}", xlabel="training seconds", ylabel="test NLL")
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.compare``."""
    parser = arguments(__doc__, name="compare")
    parser.add_argument("--data", choices=sorted(DATASETS), default="fashion-mnist")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[200, 2000])
    parser.add_argument("--max-train-rows", type=int, default=None)
    parser.add_argument("--mnist-dir", type=Path, default=DEBIAN_DIR)
    parser.add_argument("--cluster", default="none", help="pep's backend: none (in-process), local:N, ...")
    parser.add_argument("--torch-device", default="cpu", help="GPyTorch's torch device: cpu or cuda (pep runs on "
                        "JAX's default backend: the GPU where jax has its CUDA plugin)")
    parser.add_argument("--kernel-products", choices=PRODUCT_DTYPES, default="float64",
                        help="pep's kernel_products setting (multiclass-sep; the EP algebra stays float64)")
    parser.add_argument("--no-baselines", action="store_true", help="skip logistic regression and the frequencies")
    return parser


def main() -> None:
    args = cli().parse_args()
    dataset = DATASETS[args.data]
    num_inducing = dataset.settings.model["num_inducing"]
    runs = {}
    with temporary_directory(prefix="pep-compare-") as work:
        store = (fashion_mnist_store(args.mnist_dir, work, args.max_train_rows) if args.data == "fashion-mnist"
                 else open_store(airline_classes(work)))
        reference = None if args.no_baselines else baselines(store)
        arrays = _arrays(store, dataset.settings.standardize)
        for batch in args.batch_sizes:
            pep = run_sep(store, _config(dataset, args.epochs, batch, args.kernel_products), args.cluster)
            gpytorch = run_gpytorch(*arrays, num_inducing, batch, args.epochs, device=args.torch_device)
            runs[batch] = {"pep": pep, "gpytorch": gpytorch, "summary": summary(pep, gpytorch)}
            payload = {"dataset": dataset.name, "data": str(args.mnist_dir) if args.data == "fashion-mnist" else "bundled",
                       "n_train": len(arrays[0]), "n_test": len(arrays[2]),
                       "epochs": args.epochs, "num_inducing": num_inducing,
                       "block_cache_mb": block_cache_budget() / 2**20, "kernel_products": args.kernel_products,
                       "runs": runs, "baselines": reference}
            path = write_results(args.name, payload)
    plot(runs, RESULTS / f"{args.name}.png")
    print(table(json.loads(path.read_text())))


if __name__ == "__main__":
    main()
