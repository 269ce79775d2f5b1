"""Row counts padded to a few sizes, so that programs compiled for one count serve its neighbours.

JAX compiles a program per array shape. A training block of ``n`` rows is padded (with masked rows, which add
exactly zero to every sum) to :func:`bucket` ``(n)``: :data:`SMALLEST` rows below that, above it one of the
sizes ``2^k·(1 + j/4)``, ``j = 0…3`` (at most a fifth of a block is padding). The folds of a cross-validation,
the candidates of a grid search, scikit-learn's estimator checks and a notebook's refits on small subsets then
share one compiled step per model and input width. Each further size costs seconds of compilation, while the
padded rows left the wall time of 150–200-step fits on 60–80 rows unchanged (measured: more CPU time on the
larger blocks' threads, the same seconds; see the CHANGELOG). Where the arithmetic is the step's time the
padding is not free: a ``DeepGPClassifier()`` step on breast-cancer's 546 training rows took 32.9 ms padded to
768 (the sizes were ``2^k`` and ``3·2^(k−1)`` then) and 28.7 ms padded to 640 (26.3 ms unpadded; issue 63).
The held-out rows a fit scores at every evaluation (an estimator's ``early_stopping`` rows, a small test split)
go in blocks of :func:`held_out_rows` rather than the training blocks' size: a predictive costs more per row than
a step (a multi-class row's quadrature, a deep GP's samples), and 35 validation rows padded to a 320-row training
block made scoring them cost a fifth of a ``DeepGPRegressor()`` step on diabetes (issue 63). Predictions go in
fixed blocks of their own (:func:`~pep_gp.pipeline.models.predictive.predict_in_blocks`)."""

from __future__ import annotations

import os

BUCKETS_ENV = "PEP_SIZE_BUCKETS"  # "off" turns the padding off (to measure what it saves)
SMALLEST = 256
HELD_OUT_SMALLEST = 32  # the smallest block of held-out rows (:func:`held_out_rows`)


def buckets_on() -> bool:
    return os.environ.get(BUCKETS_ENV, "on").lower() not in ("off", "0", "false", "no")


def bucket(n: int, smallest: int = SMALLEST) -> int:
    """The smallest size ``2^k·(1 + j/4)`` (``j = 0…3``, at least ``smallest``, a power of two) that holds ``n``
    rows; ``n`` itself when the buckets are off."""
    if not buckets_on():
        return n
    size = smallest
    while size < n:
        size += (1 << (size.bit_length() - 1)) // 4  # a quarter of the octave's power of two
    return size


def held_out_rows(block_rows: int, n_held_out: int) -> int:
    """Rows per block of a held-out split of ``n_held_out`` rows scored beside training blocks of ``block_rows``:
    no larger than those, and no larger than the held-out rows' own bucket (at least :data:`HELD_OUT_SMALLEST`)."""
    return min(block_rows, bucket(n_held_out, HELD_OUT_SMALLEST))
