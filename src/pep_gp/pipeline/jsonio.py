"""JSON as pep writes it: strict JSON (RFC 8259), a non-finite number written as ``null``.

Python's ``json`` writes ``NaN``, ``Infinity`` and ``-Infinity`` by default, which are not JSON: strict
parsers (``jq``, JavaScript's ``JSON.parse``, most JSON libraries) refuse the whole document. Every JSON
document pep writes (``metrics.json``, checkpoint manifests, the commands' ``--json`` output, artifact
tables) goes through :func:`dumps`; a reader sees ``null`` where a metric or an energy was not finite
(e.g. the held-out NLL of a diverged run).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np


def finite_or_none(value: Any) -> Any:
    """``value`` with every non-finite float (Python or NumPy, at any depth of dicts, lists and tuples)
    replaced by None, NumPy scalars and arrays turned into Python numbers and lists, tuples into lists."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    elif isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {key: finite_or_none(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(item) for item in value]
    return value


def dumps(value: Any, **options: Any) -> str:
    """``json.dumps`` of :func:`finite_or_none` of ``value``, refusing anything that is still not JSON."""
    return json.dumps(finite_or_none(value), allow_nan=False, **options)
