"""The label-noise factors ``ε + (1 − ε)Φ`` of the multi-class model against scipy quadrature oracles, the
normalisation of their likelihood, the predictive, and the paper's path at ``ε = 0`` (pinned values)."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pep_gp import MultiClassGPClassifier
from pep_gp.core.models import multiclass_sites as sites
from pep_gp.core.models.multiclass import MultiClassGP
from pep_gp.pipeline.models.multiclass import MultiClassSettings
from tests import oracles


_predictive = jax.jit(sites.predictive_log_probs, static_argnames=("quadrature", "label_noise"))


def _pair(gap, rng):
    """One factor's cavity projections (label side ``a_y − a_k = gap``) and FITC variances."""
    a_k, w_y, w_k = rng.normal(), rng.uniform(0.2, 1.5), rng.uniform(0.2, 1.5)
    return sites.Projections(jnp.asarray(a_k + gap), jnp.asarray(w_y)), sites.Projections(jnp.asarray(a_k), jnp.asarray(w_k)), 0.4, 0.7


@pytest.mark.heavy
@pytest.mark.parametrize("gap, label_noise", [(1.0, 0.05), (-0.5, 0.05), (-3.0, 0.01), (-4.0, 0.2)])
def test_refined_sites_match_the_tilted_moments_of_the_label_noise_factor(gap, label_noise):
    """``log Z`` and the tilted mean along each class's direction within 1e-9 of nested scipy quadrature;
    the tilted variance too where the factor's curvature ``ν`` is non-negative; where it is negative (a
    label far on the wrong side, the tilted distribution wider than the cavity) the site adds no precision
    (the clip at 0) but still moves the mean."""
    label, other, fitc_y, fitc_k = _pair(gap, np.random.default_rng(int(10 * abs(gap))))
    z, (mean_y, var_y), (mean_k, var_k) = oracles.probit_tilted_moments_2d(
        float(label.mean), float(label.var), float(other.mean), float(other.var), fitc_y + fitc_k, 1.0, label_noise)
    log_z = sites.log_partition(label, other, fitc_y, fitc_k, label_noise=label_noise)
    assert float(log_z) == pytest.approx(np.log(z), abs=1e-9)
    new = sites.refine(label, other, fitc_y, fitc_k, label_noise=label_noise)
    widened = var_y > float(label.var)  # ν < 0: the clipped case
    assert widened == (gap < -2.0)  # the cases above exercise both branches
    for proj, c1, c2, t_mean, t_var in [(label, new.label_precision, new.label_shift, mean_y, var_y),
                                        (other, new.other_precision, new.other_shift, mean_k, var_k)]:
        c1, c2, a, w = (float(v) for v in (c1, c2, proj.mean, proj.var))
        q_var = 1.0 / (1.0 / w + c1)  # cavity × site along the direction (1-D: the other directions are untouched)
        q_mean = q_var * (a / w + c2)
        assert q_mean == pytest.approx(t_mean, abs=1e-9)
        if widened:
            assert c1 == 0.0 and t_var > w
        else:
            assert c1 > 0.0 and q_var == pytest.approx(t_var, abs=1e-9)


def test_label_noise_slope_and_curvature_match_finite_differences():
    """``g = ∂log Z/∂a_y`` and ``ν = g² − 2∂log Z/∂w_y`` of the refined site against central differences of
    :func:`log_partition`, over a range of gaps where ``ν > 0``."""
    h = 1e-5
    for gap in (-1.5, -0.5, 0.0, 1.0, 3.0):
        label, other, fitc_y, fitc_k = _pair(gap, np.random.default_rng(1))

        def log_z(da=0.0, dw=0.0):
            moved = sites.Projections(label.mean + da, label.var + dw)
            return float(sites.log_partition(moved, other, fitc_y, fitc_k, label_noise=0.1))

        slope = (log_z(da=h) - log_z(da=-h)) / (2 * h)
        nu = slope**2 - 2 * (log_z(dw=h) - log_z(dw=-h)) / (2 * h)
        new = sites.refine(label, other, fitc_y, fitc_k, label_noise=0.1)
        denominator = 1.0 - nu * float(label.var)  # C¹ = ν/(1 − νw), C² = (g + νa)/(1 − νw)
        assert float(new.label_precision) == pytest.approx(nu / denominator, rel=1e-6)
        assert float(new.label_shift) == pytest.approx((slope + nu * float(label.mean)) / denominator, rel=1e-6)


def test_the_label_noise_likelihood_is_normalised_over_the_labels():
    """``Σ_y Π_{k≠y}(ε + (1 − ε)Θ(f_y − f_k)) = Σ_{r<C} ε^r`` for every ``f``: the constant that normalises
    the likelihood (and the predictive)."""
    rng = np.random.default_rng(0)
    for num_classes, eps in itertools.product((2, 3, 6), (0.0, 0.05, 0.5)):
        f = rng.normal(size=num_classes)
        total = sum(np.prod([eps + (1 - eps) * (f[y] > f[k]) for k in range(num_classes) if k != y])
                    for y in range(num_classes))
        assert np.log(total) == pytest.approx(sites.log_label_noise_normaliser(eps, num_classes), abs=1e-12)


@pytest.mark.heavy
def test_label_noise_predictive_matches_scipy_quad_and_sums_to_one():
    """The predictive of the label-noise likelihood within 1e-9 of ``scipy.integrate.quad`` (absolute, per class)
    on three random rows of four classes at ε = 0.01 and 0.3; probabilities sum to 1 and are floored above the ε = 0 ones' extremes."""
    rng = np.random.default_rng(5)
    c = 4
    mean, var = rng.normal(size=(3, c)) * 3.0, 10 ** rng.uniform(-2, 0.5, size=(3, c))
    for eps in (0.01, 0.3):
        all_probs = np.exp(np.asarray(_predictive(jnp.asarray(mean), jnp.asarray(var), label_noise=eps)))
        for row, probs in enumerate(all_probs):
            np.testing.assert_allclose(probs, oracles.multiclass_predictive_probabilities(mean[row], var[row], eps),
                                       rtol=0, atol=1e-9)
            assert probs.sum() == pytest.approx(1.0, abs=1e-9)
            # no class is less likely than label noise alone makes it: ε^(C−1)/Z_C(ε)
            assert probs.min() >= eps ** (c - 1) / np.exp(sites.log_label_noise_normaliser(eps, c)) * (1 - 1e-9)


# The pre-label-noise code's numbers (computed at the commit before the option existed). Of the factors' functions
# on five random pairs: log Z and the four site scalars (eager), and log p(y|x) of two rows of five classes
# (jitted: XLA fuses the compiled predictive otherwise than the eager one, in the last bit):
PINNED_SITES = [-0.11964499336984387, -0.5069372972154682, -3.034385967371644, -1.1280282328857223, -0.5653857675963728,
                0.12437168445652187, 0.19069932591039604, 0.26460740498152363, 0.3084971466337916, 0.1927523740494621,
                0.14303964109375047, 0.5038179042049216, 1.0915697017977324, 0.2738021991996027, 0.25594744965251887,
                0.1321958849425276, 0.25763799059697984, 0.36266333119231564, 0.34423105604439697, 0.2343225909844622,
                -0.413896184754672, -0.4957394924233922, -0.7228198166138317, -1.2575215934858315, -0.8150085683026639,
                -1.4078541061107233, -0.5180482425571684, -2.5407240415287973, -4.637991569712051, -2.6427713552184837,
                -6.9425412604302075, -2.4785630836796515, -0.11472178281856316, -4.628026114530481, -4.284367279626743]
# Of the model on a small problem: the energy after three damped full-batch site updates, log p(y|x) of four
# rows, and the last site statistics.
PINNED = [-30.61903865400187, -0.7126434258529177, -0.9572371163007207, -2.0738454349676454, -1.3303378471206897,
          -1.1347280832919435, -0.8816416479528009, -1.2967496430126912, -1.1541181520418458, -0.8885650471871469,
          -1.3223453899225692, -1.2134795241891325, -0.8293587275574739, 1.5598717968602946, 0.31057418474679716,
          0.9769280988744979, -0.23662792442788305, 1.924189520256171, 0.03535900279635798, 0.1995092362216637,
          1.0281479755759082, 1.2825536411612874, 0.7597356062405713, 0.2033692588750994, 0.2140821090163725]


def _three_site_updates(label_noise):
    rng = np.random.default_rng(0)
    n, num_classes, m = 24, 3, 4
    x = rng.normal(size=(n, 2))
    y = np.arange(n) % num_classes
    x[:, 0] += y
    model = MultiClassGP(num_classes, label_noise=label_noise)
    params = model.init(x, m, inducing=rng.normal(size=(num_classes, m, 2)), noise=0.3, seed=0)
    x, y, mask = jnp.asarray(x), jnp.asarray(y), jnp.ones(n, bool)
    size = model.data_size(y)
    shared = model.step_shared(params, size)
    for _ in range(3):
        stats = model.site_stats(params, shared, x, y, mask)
        params, shared, ok = model.site_update(params, shared, stats, size, 0.5)
        assert bool(ok)
    return model, params, x, y, stats


@pytest.mark.heavy
def test_zero_label_noise_keeps_the_papers_factors_to_the_last_bits():
    """``label_noise = 0`` (given or left out) takes the paper's path in :mod:`multiclass_sites`: the pinned
    numbers of the code before the option, to the last bit."""
    rng = np.random.default_rng(7)
    a, w, s = rng.normal(size=(2, 5)) * 2, rng.uniform(0.1, 2, size=(2, 5)), rng.uniform(0.1, 1, size=(2, 5))
    label, other = (sites.Projections(jnp.asarray(a[i]), jnp.asarray(w[i])) for i in (0, 1))
    for given in ({}, {"label_noise": 0.0}):
        got = np.asarray(sites.log_partition(label, other, s[0], s[1], **given)).tolist()
        for v in sites.refine(label, other, s[0], s[1], **given):
            got += np.asarray(v).tolist()
        assert got == PINNED_SITES[:25]
        # compiled: how XLA fuses its log-sum-exp depends on the processor's instructions, by up to one unit in
        # the last place of its order-one terms (4.4e-16, seen on one machine and not on another)
        predictive = np.asarray(_predictive(jnp.asarray(a), jnp.asarray(w), **given)).ravel()
        np.testing.assert_allclose(predictive, PINNED_SITES[25:], rtol=0, atol=4.5e-16)


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_zero_label_noise_is_the_papers_model_to_the_last_bits():
    """``label_noise = 0`` takes the paper's code path: the pinned numbers of the model before the option (equal
    to the last bit on the machine that pinned them; 1e-13 allows another CPU's rounding)."""
    model, params, x, y, stats = _three_site_updates(0.0)
    got = [float(model.energy(params, x, y)), *np.asarray(model.predict(params, x[:4])).ravel().tolist(),
           *np.asarray(stats.precision[:, 0, :]).ravel().tolist()]
    np.testing.assert_allclose(got, PINNED, rtol=1e-13, atol=0)


@pytest.mark.heavy
def test_label_noise_sep_keeps_site_precisions_non_negative_with_flipped_labels():
    """Three damped SEP updates with ε = 0.2 and a third of the labels flipped: every refined site precision
    ``≥ 0`` (the clip), some clipped to exactly 0, the tied precision symmetric positive semi-definite and the
    energy finite."""
    rng = np.random.default_rng(0)
    n, num_classes, m = 24, 3, 4
    x = rng.normal(size=(n, 2))
    y = np.arange(n) % num_classes
    x[:, 0] += 3.0 * y
    y[::4] = (y[::4] + 1) % num_classes
    model = MultiClassGP(num_classes, label_noise=0.2)
    inducing = x[rng.choice(n, num_classes * m, replace=False)].reshape(num_classes, m, 2)
    params = model.init(x, m, inducing=inducing, noise=0.3, seed=0)
    x, y, mask = jnp.asarray(x), jnp.asarray(y), jnp.ones(n, bool)
    size = model.data_size(y)
    shared = model.step_shared(params, size)
    for _ in range(3):
        rows = model.block_rows(params, shared, x)
        label, other, label_fitc, other_fitc = model._pair_cavities(rows, shared.cavity, y)
        refined = sites.refine(label, other, label_fitc, other_fitc, label_noise=0.2)
        factors = np.asarray(sites.factor_mask(y, mask, num_classes))
        precisions = np.stack([np.asarray(refined.label_precision)[factors], np.asarray(refined.other_precision)[factors]])
        assert np.all(precisions >= 0.0)
        params, shared, ok = model.site_update(params, shared, model.site_stats(params, shared, x, y, mask), size,
                                               0.5)
        assert bool(ok)
    assert np.any(precisions == 0.0)
    tied = np.asarray(params.factor.precision)
    np.testing.assert_allclose(tied, np.swapaxes(tied, -1, -2), atol=1e-12)
    assert np.all(np.linalg.eigvalsh(tied) > -1e-10)
    assert np.isfinite(float(model.energy(params, x, y)))


@pytest.mark.parametrize("label_noise", [-0.1, 1.0, 1.5])
def test_label_noise_outside_zero_to_one_is_refused_naming_the_setting(label_noise):
    with pytest.raises(ValueError, match="label_noise"):
        MultiClassGP(2, label_noise=label_noise)
    with pytest.raises(ValueError, match="label_noise: Input should be"):
        MultiClassGPClassifier(num_inducing=2, label_noise=label_noise).fit(np.eye(4), [0, 1, 2, 0])


def test_label_noise_needs_alpha_one():
    with pytest.raises(ValueError, match="label_noise = 0.1 needs alpha = 1"):
        MultiClassSettings(alpha=0.5, label_noise=0.1)
    with pytest.raises(ValueError, match="needs alpha = 1"):
        MultiClassGP(2, alpha=0.5, label_noise=0.1)
    label, other, fitc_y, fitc_k = _pair(0.0, np.random.default_rng(0))
    with pytest.raises(ValueError, match="needs alpha = 1"):
        sites.refine(label, other, fitc_y, fitc_k, alpha=0.5, label_noise=0.1)
