"""Source readers, one module per kind of input, and the registry mapping SOURCE names to them.

Each reader turns its input into :class:`~pep_gp.pipeline.data.sources.base.RowBlock` s (constant memory in the
input size); :func:`open_source` picks the reader for a name given on the command line.
"""

from __future__ import annotations

from collections.abc import Callable

from ...errors import InputError, did_you_mean
from .airline import open_airline
from .base import RowBlock, Source, SourceRequest
from .mnist import open_mnist
from .sklearn_sets import SETS, open_sklearn
from .tables import open_csv, open_npz, open_parquet

READERS: dict[str, Callable[[SourceRequest], Source]] = {
    "airline": open_airline,
    "mnist": open_mnist,
    "csv": open_csv,
    "parquet": open_parquet,
    "npz": open_npz,
}
SOURCE_NAMES = (*READERS, *(f"sklearn:{name}" for name in SETS))

__all__ = ["READERS", "SOURCE_NAMES", "RowBlock", "Source", "SourceRequest", "open_source"]


def open_source(name: str, request: SourceRequest = SourceRequest()) -> Source:
    """Open the source called ``name`` with the user's options.

    Args:
        name: ``airline``, ``mnist``, ``csv``, ``parquet``, ``npz`` or ``sklearn:NAME``.
        request: the user's options (``--input`` paths, ``--target``, ``--task``, a table's column options,
            and for airline ``--synthetic-rows``).

    Returns:
        The :class:`Source`, its inputs checked (files exist, headers fit); nothing read yet.

    Raises:
        InputError: unknown name, or inputs/options the source cannot use.
    """
    if request.synthetic_rows is not None:
        if name != "airline":
            raise InputError(f"--synthetic-rows: only source 'airline' draws synthetic rows, not {name!r}")
        from .synthetic_airline import open_synthetic_airline

        return open_synthetic_airline(request, request.synthetic_rows)
    if name.startswith("sklearn:"):
        return open_sklearn(name.removeprefix("sklearn:"), request)
    if name not in READERS:
        raise InputError(f"SOURCE: unknown source {name!r}; expected one of {', '.join(SOURCE_NAMES)}"
                         f"{did_you_mean(name, SOURCE_NAMES)}")
    return READERS[name](request)
