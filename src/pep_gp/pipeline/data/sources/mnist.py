"""MNIST-format image sets from IDX files (raw or ``.gz``), with the files' own train/test split.

A directory holds the four files of the MNIST distribution: ``train-images-idx3-ubyte``,
``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte`` and ``t10k-labels-idx1-ubyte`` (each possibly
``.gz``; a ``.`` instead of the last ``-`` is accepted too). Fashion-MNIST uses the same format; the
Debian package ``dataset-fashion-mnist`` installs it under :data:`DEBIAN_DIR`, the default when no
directory is given. Pixels are scaled to [0, 1]; labels are the 10 classes 0..9.

IDX format: a big-endian magic number ``0x0000 TT NN`` (TT = 0x08 for unsigned bytes, NN = number of
dimensions), NN big-endian uint32 sizes, then the data in C order.
"""

from __future__ import annotations

import gzip
import math
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import numpy as np

from ...errors import InputError
from .base import RowBlock, Source, SourceRequest, reading

DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")
N_CLASSES = 10
UNSIGNED_BYTE = 0x08
GZIP_MAX_RATIO = 1032  # DEFLATE expands at most about this much
ITEMS_PER_BLOCK = 4096
PREFIXES = {"train": "train", "test": "t10k"}


def open_mnist(request: SourceRequest) -> Source:
    """The MNIST source for the directory ``--input`` (default: Debian's Fashion-MNIST)."""
    request.refuse("mnist", target=True, task=True, table=True)
    if len(request.inputs) > 1:
        raise InputError(f"--input: source 'mnist' expects one directory, found {len(request.inputs)} "
                         "inputs")
    directory = request.inputs[0] if request.inputs else DEBIAN_DIR
    if not request.inputs and not directory.is_dir():
        raise InputError(f"--input: no directory given and Fashion-MNIST is not installed at {directory} "
                         "(apt-get install -y dataset-fashion-mnist, or give an MNIST directory)")
    if not directory.is_dir():
        raise InputError(f"{directory}: expected a directory holding the MNIST IDX files")
    files = {split: (_find(directory, prefix, "images", 3), _find(directory, prefix, "labels", 1))
             for split, prefix in PREFIXES.items()}
    shapes = {split: _check_pair(images, labels) for split, (images, labels) in files.items()}
    if shapes["train"][1:] != shapes["test"][1:]:
        raise InputError(f"{files['test'][0]}: expected images of {shapes['train'][1:]} pixels like "
                         f"{files['train'][0]}, found {shapes['test'][1:]}")
    height, width = shapes["train"][1:]

    def read() -> Iterator[RowBlock]:
        for split, (images, labels) in files.items():
            yield from _blocks(images, labels, shapes[split], split == "test")

    return Source("mnist", f"mnist IDX files in {directory} ({shapes['train'][0]} train, "
                  f"{shapes['test'][0]} test images of {height}x{width}; pixels / 255)",
                  tuple(f"pixel_{r}_{c}" for r in range(height) for c in range(width)), "label",
                  "classification", N_CLASSES, None, read)


def _find(directory: Path, prefix: str, kind: str, ndim: int) -> Path:
    """The IDX file ``<prefix>-<kind>-idx<ndim>-ubyte[.gz]`` in ``directory`` (raw preferred)."""
    stem = f"{prefix}-{kind}-idx{ndim}-ubyte"
    for name in (stem, f"{stem}.gz", stem.replace(f"-idx{ndim}", f".idx{ndim}"),
                 stem.replace(f"-idx{ndim}", f".idx{ndim}") + ".gz"):
        if (directory / name).is_file():
            return directory / name
    raise InputError(f"{directory}: no file {stem} or {stem}.gz (expected the four MNIST IDX files "
                     "train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, "
                     "t10k-labels-idx1-ubyte, each raw or .gz)")


@contextmanager
def _open_idx(path: Path, ndim: int) -> Iterator[tuple[IO[bytes], tuple[int, ...]]]:
    """Open an IDX file, check its magic number, and give the handle (at the data) and its shape."""
    with gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb") as handle:
        magic = _read_exact(path, handle, 4, "the magic number")
        if magic[:2] != b"\0\0" or magic[2] != UNSIGNED_BYTE or magic[3] != ndim:
            raise InputError(f"{path}: IDX magic number: expected 0x{(UNSIGNED_BYTE << 8) + ndim:08x} "
                             f"(unsigned bytes, {ndim} dimension(s)), found 0x{magic.hex()}")
        shape = struct.unpack(f">{ndim}I", _read_exact(path, handle, 4 * ndim, "the dimension sizes"))
        _check_claimed_size(path, shape)
        yield handle, shape


def _check_claimed_size(path: Path, shape: tuple[int, ...]) -> None:
    """InputError unless the items an IDX header claims fit the file (raw, or gzip-compressed at most
    :data:`GZIP_MAX_RATIO`-fold): a header is never trusted to size anything."""
    claimed = math.prod(shape)
    holds = path.stat().st_size * (GZIP_MAX_RATIO if path.suffix == ".gz" else 1)
    if claimed > holds:
        raise InputError(f"{path}: its header claims {' x '.join(map(str, shape))} bytes of data ({claimed:,}), "
                         f"more than the file holds ({holds:,} at most); the file is damaged")


def _check_pair(images: Path, labels: Path) -> tuple[int, int, int]:
    """Check an images/labels pair's headers; return the images' shape ``(items, height, width)``."""
    with _open_idx(images, 3) as (_, shape), _open_idx(labels, 1) as (_, (n_labels,)):
        pass
    if shape[0] != n_labels:
        raise InputError(f"{labels}: expected {shape[0]} labels (as many as images in {images.name}), "
                         f"found {n_labels}")
    return shape


def _blocks(images: Path, labels: Path, shape: tuple[int, int, int], is_test: bool
            ) -> Iterator[RowBlock]:
    """Stream an images/labels pair as blocks of (pixels / 255, label) rows."""
    n_items, height, width = shape
    with _open_idx(images, 3) as (pixels, _), _open_idx(labels, 1) as (classes, _):
        for start in range(0, n_items, ITEMS_PER_BLOCK):
            count = min(ITEMS_PER_BLOCK, n_items - start)
            where = f"items {start}..{start + count - 1}"
            X = np.frombuffer(_read_exact(images, pixels, count * height * width, where), np.uint8)
            y = np.frombuffer(_read_exact(labels, classes, count, where), np.uint8)
            yield RowBlock(X.reshape(count, height * width) / 255.0, y.astype(np.float64),
                           str(labels), np.arange(start, start + count), "item",
                           np.full(count, is_test))
        for path, handle in ((images, pixels), (labels, classes)):
            with reading(path):
                extra = handle.read(1)
            if extra:
                raise InputError(f"{path}: expected the file to end after {n_items} items (as its "
                                 "header says), found more data")


def _read_exact(path: Path, handle: IO[bytes], size: int, what: str) -> bytes:
    """Read exactly ``size`` bytes; raise InputError naming the file and ``what`` if it ends early."""
    with reading(path):
        data = handle.read(size)
    if len(data) != size:
        raise InputError(f"{path}: truncated: expected {size} bytes for {what}, found {len(data)}")
    return data
