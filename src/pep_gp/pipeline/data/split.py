"""The train/test split: the ``--test-size`` option and the seeded choice of test rows."""

from __future__ import annotations

import numpy as np

from ..errors import InputError


def parse_test_size(text: str) -> int | float:
    """Parse ``--test-size``: a row count (``10000``) or a fraction of the rows (``0.2``).

    Raises:
        InputError: not a number, a fraction outside (0, 1), or a count below 1.
    """
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"--test-size: expected a row count or a fraction in (0, 1), "
                         f"found {text!r}") from None
    if value.is_integer() and value >= 1 and "." not in text:
        return int(value)
    if 0 < value < 1:
        return value
    raise InputError(f"--test-size: expected a row count ≥ 1 or a fraction in (0, 1), found {text!r}")


def choose_test_rows(n_rows: int, test_size: int | float, seed: int) -> np.ndarray:
    """Choose the test rows: the same ``(n_rows, test_size, seed)`` always gives the same rows.

    Args:
        n_rows: rows read from the source.
        test_size: a count, or a fraction rounded to a count.
        seed: seed of the numpy ``default_rng`` that draws the rows.

    Returns:
        (n_rows,) bool, True for test rows.

    Raises:
        InputError: the test split would hold no row, or leave fewer than one row for training.
    """
    count = round(test_size * n_rows) if isinstance(test_size, float) else test_size
    if not 1 <= count < n_rows:
        raise InputError(f"--test-size: {test_size} gives {count} test rows of the {n_rows} rows read; "
                         f"expected between 1 and {n_rows - 1}")
    mask = np.zeros(n_rows, dtype=bool)
    mask[np.random.default_rng(seed).choice(n_rows, size=count, replace=False)] = True
    return mask
