"""Ordinal regression end to end (``OrdinalGPClassifier``, ``--model sparse-gp-ordinal``): a fit on a synthetic
ordinal problem recovers the latent function's ordering and keeps its cut points ordered, its probabilities
sum to one, and the saved run gives ``pep predict`` (its function, in this process) the estimator's
probabilities."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

from pep_gp import OrdinalGPClassifier
from pep_gp.pipeline.runs.predict import predict

CUTS = np.array([-1.2, -0.2, 0.9, 1.8])


def ordinal_rows(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``x`` ``[n, 2]`` uniform on ``[−3, 3]²``, the latent ``f = 2 sin(x0) + x1/2`` and labels ``1 … 5``: the
    number of :data:`CUTS` below ``f + ε``, ``ε ~ N(0, 0.3²)``, plus 1 (labels need not start at 0)."""
    x = rng.uniform(-3.0, 3.0, size=(n, 2))
    f = 2.0 * np.sin(x[:, 0]) + 0.5 * x[:, 1]
    return x, f, 1 + np.searchsorted(CUTS, f + 0.3 * rng.standard_normal(n))


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_a_fit_recovers_the_latent_ordering_and_pep_predict_reads_its_run(tmp_path):
    """150 rows of 5 ordered classes: on 300 new rows the posterior latent mean ranks as the true ``f`` does
    (Spearman > 0.95), the most probable class is right more often than the commonest class's share plus 0.3,
    the learned cut points increase, every row's probabilities sum to 1 (to 1e-12); ``pep predict`` of the
    saved run writes the same probabilities (to 1e-12) and labels."""
    rng = np.random.default_rng(0)
    x, _, y = ordinal_rows(150, rng)
    model = OrdinalGPClassifier(num_inducing=15, max_iter=150).fit(x, y)
    new_x, new_f, new_y = ordinal_rows(300, rng)
    assert list(model.classes_) == [1, 2, 3, 4, 5]
    assert spearmanr(model.predict_f(new_x)[0], new_f)[0] > 0.95
    assert np.mean(model.predict(new_x) == new_y) > np.max(np.bincount(new_y)) / new_y.size + 0.3
    assert np.all(np.diff(model.cut_points_) > 0)
    proba = model.predict_proba(new_x)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=0, atol=1e-12)

    model.save(tmp_path / "run")
    pd.DataFrame(new_x, columns=["x0", "x1"]).to_csv(tmp_path / "new.csv", index=False)
    predict(tmp_path / "run", tmp_path / "new.csv", tmp_path / "p.csv")  # what pep predict runs
    written = pd.read_csv(tmp_path / "p.csv")
    np.testing.assert_allclose(written[[f"proba_{k}" for k in range(1, 6)]].to_numpy(), proba, rtol=1e-12, atol=1e-15)
    assert written["label"].tolist() == model.predict(new_x).tolist()
