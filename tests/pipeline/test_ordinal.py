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


def test_a_prior_on_the_cut_points_adds_scipys_log_density_of_their_gaps():
    """``prior={"cut_points": Gamma(2, 3)}`` (issue 65): the model the spec builds adds to its energy the log
    density of each gap ``b_{k+1} − b_k = softplus(r_k)`` by scipy plus the softplus's log-slope ``log σ(r_k)``
    (the convention of :mod:`pep_gp.core.priors`), at several stored values; ``b_1`` has none."""
    from scipy import stats
    from pep_gp.core import float64
    from pep_gp.core.log_prior import log_prior
    from pep_gp.core.priors import Gamma
    from pep_gp.pipeline.models.ordinal import ORDINAL

    with float64():
        model = ORDINAL.build(ORDINAL.Settings(prior={"cut_points": Gamma(2.0, 3.0)}), {"n_classes": 4})
        for raw in ([-0.7, 0.3, -1.1], [2.0, -2.5, 0.8], [0.0, 1.5, 4.0]):
            ours = log_prior({"likelihood": {"raw_cut_points": np.asarray(raw)}}, model.priors)
            gaps = np.logaddexp(0.0, raw[1:])  # softplus
            expected = np.sum(stats.gamma(a=2.0, scale=1 / 3.0).logpdf(gaps) - np.logaddexp(0.0, -np.asarray(raw[1:])))
            assert float(ours) == pytest.approx(expected, rel=1e-12)
            assert np.allclose(np.diff(model.likelihood.cut_points({"raw_cut_points": np.asarray(raw)})), gaps)


@pytest.mark.parametrize("values, message", [
    ({"cut_points": [0.5, 0.1]}, r"cut_points: .*strictly increasing.*got \[0.5, 0.1\]"),
    ({"cut_points": [0.0, 1.0]}, r"cut_points: 4 classes need 3 cut points; got 2"),
    ({"fixed": "cut"}, r"fixed names \['cut'\], which likelihood 'ordinal' does not have; its parameters are "
                       r"\['cut_points'\]"),
])
def test_bad_cut_point_settings_are_refused_by_name(values, message):
    x, _, y = ordinal_rows(20, np.random.default_rng(1))
    with pytest.raises(ValueError, match=message):
        OrdinalGPClassifier(num_inducing=3, **values).fit(x, np.minimum(y, 4))


@pytest.mark.heavy  # a short fit: ~10 s on 2 shared cores, compiling
def test_fixed_cut_points_keep_their_bits_and_free_ones_move():
    """``cut_points`` given and ``fixed="cut_points"`` (GPflow's ``Ordinal(bin_edges)``): after a fit the stored
    cut points are those of the given ones to the bit (``cut_points_`` the given values to rounding); without
    ``fixed`` the same fit from the same start moves them."""
    x, _, y = ordinal_rows(60, np.random.default_rng(2))
    given = [-1.0, 0.0, 1.0, 2.0]
    settings = {"cut_points": given, "num_inducing": 5, "max_iter": 10}
    fixed = OrdinalGPClassifier(fixed="cut_points", **settings).fit(x, y)
    start = fixed.model_.likelihood.params_of(given)["raw_cut_points"]
    assert np.asarray(fixed.params_.likelihood["raw_cut_points"]).tobytes() == np.asarray(start).tobytes()
    np.testing.assert_allclose(fixed.cut_points_, given, rtol=0, atol=1e-12)
    free = OrdinalGPClassifier(**settings).fit(x, y)
    assert not np.allclose(free.cut_points_, given, rtol=0, atol=1e-6)


def test_a_model_table_and_set_give_the_cut_point_settings():
    """``[model]`` of ``sparse-gp-ordinal`` and ``--set`` spell them as a likelihood parameter's: ``cut_points``,
    ``fixed`` and ``prior`` (the leaf the prior is on, with its map to the gaps)."""
    from pep_gp.core.ordinal import Ordinal
    from pep_gp.core.priors import Gamma
    from pep_gp.pipeline.models import get_model, model_settings
    from pep_gp.pipeline.runs.config import load_config, parse_settings

    spec = get_model("sparse-gp-ordinal")
    table = {"cut_points": [-1.0, 1.0], "prior": {"cut_points": {"name": "gamma", "shape": 2.0, "rate": 2.0}}}
    settings = model_settings(spec, table)
    assert settings.cut_points == (-1.0, 1.0)
    assert settings.leaf_priors() == (("raw_cut_points", Gamma(2.0, 2.0), Ordinal.gaps),)
    config = load_config(None, settings=parse_settings(["model.fixed=cut_points"]))
    assert model_settings(spec, config.model).fixed_leaves() == {"raw_cut_points"}
