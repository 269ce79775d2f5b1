"""Multi-class EP with untied factors (Villacampa-Calvo & Hernández-Lobato 2017, App. B–G): one rank-one factor per (i, k ≠ y_i).

The state is O(N·C·M): four scalars per factor and, per row and class, the direction ``υ_i^c`` with
which the row's sites were last refined (Villacampa-Calvo & Hernández-Lobato 2017, App. B). The sites' natural parameters stay fixed in ``f̄``
coordinates while hyper-parameters move (Villacampa-Calvo & Hernández-Lobato 2017 and the authors' code); their per-class sums are kept in
``params.factor`` (a :class:`~pep_gp.core.models.multiclass.NaturalFactor`), so ``q_c ∝ p(f̄^c)·exp(η̃ᵀf̄ −
½f̄ᵀΛ̃f̄)`` is formed exactly as for SEP (eq. 25). For N up to ~10⁴.

With a power α (``model.alpha``) every cavity removes ``φ̃^α`` and the refined site is
``(tilted/cavity)^{1/α}`` (Power EP, Bui, Yan & Turner 2017, §3.4); α = 1 is the paper's EP.

* :func:`update` — parallel, damped refinement of a set of rows (all rows: batch EP, App. E; a minibatch:
  stochastic EP of §2.3.2). Each factor's cavity removes *its own* site along its stored direction and
  is projected onto the current ``υ`` (Villacampa-Calvo & Hernández-Lobato 2017, App. C, "mini-batch subtlety"). Rows with an improper cavity
  (``1 − C¹υᵀVυ ≤ 0``, possible with damping, parallel updates or moved hyper-parameters) are skipped
  and counted; the caller may reduce the damping (the reference code halves it).
* :func:`global_energy` + :func:`local_energy` — ``log Z_q`` of eq. (9)/(60) with the scalar form of
  eq. (61); their gradient is eq. (10)/(12): ``q`` and every cavity held fixed in ``f̄`` coordinates. Priors on
  the kernels' hyper-parameters add ``log p(θ)`` to the global term (a MAP fit, :mod:`pep_gp.core.log_prior`).

A mean function (``params.mean``, one per class) makes class ``c``'s prior ``f_c ~ GP(m_c, k_c)``: the sites, ``q``
and the cavities stay those of ``g_c = f_c − m_c``, each factor sees its cavity's mean plus ``m_c(x_i)``, and a
refined site ``exp(C² f − ½C¹ f²)`` is stored in ``g`` as ``exp((C² − C¹m) g − ½C¹ g²)``
(:mod:`pep_gp.core.models.multiclass`).
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import bank, sep
from ..log_prior import with_log_prior
from ..parameters import on_device
from . import multiclass_sites as sites
from .multiclass import MultiClassGP, MultiClassParams, NaturalFactor
from .multiclass_likelihoods import label_side


class EPSites(NamedTuple):
    """Untied EP state for a set of rows."""

    scalars: sites.SiteScalars  # [N, C] each; zero where k = y_i
    directions: jnp.ndarray  # υ_i^c at the last refinement, [N, C, M]


class _PairCavities(NamedTuple):
    rows: bank.RowProjections  # at the current hyper-parameters
    label: sites.Projections  # [B, C]
    other: sites.Projections  # [B, C]
    label_fitc: jnp.ndarray  # [B, 1]
    other_fitc: jnp.ndarray  # [B, C]
    label_removal: jnp.ndarray  # 1 − C¹υ̃ᵀVυ̃ on class y_i, [B, C]
    other_removal: jnp.ndarray  # the same on class k, [B, C]
    label_change: jnp.ndarray  # g(θ^∖) − g(θ) on class y_i, [B, C] (eq. 61)
    other_change: jnp.ndarray  # the same on class k, [B, C]
    label_mean: jnp.ndarray | None  # m_{y_i}(x_i), [B, 1]: the prior mean the label side's factor adds (None: zero)
    other_mean: jnp.ndarray | None  # m_k(x_i), [B, C]


def init_sites(num_rows: int, params: MultiClassParams) -> EPSites:
    """All sites zero (``q`` = prior, Villacampa-Calvo & Hernández-Lobato 2017, App. B)."""
    num_classes, num_inducing = params.factor.shift.shape
    zeros = on_device(np.zeros((num_rows, num_classes)))
    return EPSites(sites.SiteScalars(zeros, zeros, zeros, zeros), on_device(np.zeros((num_rows, num_classes, num_inducing))))


def _pair_cavities(model: MultiClassGP, params: MultiClassParams, state: EPSites, x, y, hold: bool) -> _PairCavities:
    prior = model.prior_factors(params)
    rows = bank.row_projections(model.sparse_gps(params), prior, x)
    q = bank.gaussians(prior, params.factor, 1.0)
    if hold:
        q = jax.lax.stop_gradient(q)
    stored = jnp.swapaxes(state.directions, 0, 1)  # [C, B, M]
    current_half = jnp.einsum("cbm,cmn->bcn", rows.directions, q.sqrt_cov)
    stored_half = jnp.einsum("cbm,cmn->bcn", stored, q.sqrt_cov)
    v_uu, v_uo, v_oo = (jnp.sum(a * b, axis=-1) for a, b in
                        [(current_half, current_half), (current_half, stored_half), (stored_half, stored_half)])
    mu_u = jnp.einsum("cbm,cm->bc", rows.directions, q.mean)
    mu_o = jnp.einsum("cbm,cm->bc", stored, q.mean)
    s = jax.tree_util.tree_map(lambda c: model.alpha * c, state.scalars)  # the cavity removes φ̃^α
    label_q = [label_side(v, y) for v in (v_uu, v_uo, v_oo, mu_u, mu_o)]
    label, label_removal = sites.remove_site(*label_q, s.label_precision, s.label_shift)
    other, other_removal = sites.remove_site(v_uu, v_uo, v_oo, mu_u, mu_o, s.other_precision, s.other_shift)
    fitc = rows.fitc_var.T
    prior_mean = params.mean.each(x)
    label_mean = None if prior_mean is None else label_side(prior_mean, y)
    if prior_mean is not None:  # the factors see f = g + m (module docstring)
        label, other = label._replace(mean=label.mean + label_mean), other._replace(mean=other.mean + prior_mean)
    return _PairCavities(
        rows, label, other, label_side(fitc, y), fitc, label_removal, other_removal,
        sites.log_normaliser_change(s.label_precision, s.label_shift, label_q[2], label_q[4]),
        sites.log_normaliser_change(s.other_precision, s.other_shift, v_oo, mu_o), label_mean, prior_mean,
    )


def update(model: MultiClassGP, params: MultiClassParams, state: EPSites, x, y, mask, damping=1.0):
    """One parallel, damped EP refinement of the factors of the rows ``x, y`` (``state`` holds their sites).

    New scalars are ``ρ·refined + (1 − ρ)·old`` (App. E; the stored direction becomes the current ``υ``,
    as in the reference code) and the per-class sums in ``params.factor`` are updated by
    ``+ new − old`` (incremental form of Villacampa-Calvo & Hernández-Lobato 2017, App. B).

    Returns:
        ``(params, state, skipped)``: the updated parameters and row sites, and the number of unmasked
        rows left unchanged because one of their cavities was improper or a refined site was not finite
        (such a row keeps its old sites, so the per-class sums stay finite).
    """
    num_classes = model.num_classes
    cav = _pair_cavities(model, params, state, x, y, hold=False)
    factors = sites.factor_mask(y, mask, num_classes)
    refined = sites.refine(cav.label, cav.other, cav.label_fitc, cav.other_fitc, model.alpha,
                           label_noise=model.label_noise)
    if cav.other_mean is not None:  # the sites in g (module docstring)
        refined = refined._replace(label_shift=refined.label_shift - refined.label_precision * cav.label_mean,
                                   other_shift=refined.other_shift - refined.other_precision * cav.other_mean)
    finite = jnp.all(jnp.stack([jnp.isfinite(leaf) for leaf in refined]), axis=0)
    valid = (cav.label_removal > 0) & (cav.other_removal > 0) & finite
    refresh = mask & jnp.all(valid | ~factors, axis=1)  # rows refined this time
    chosen = factors & refresh[:, None]
    damped = jax.tree_util.tree_map(
        lambda new, old: jnp.where(chosen, damping * new + (1.0 - damping) * old, old), refined, state.scalars
    )
    directions = jnp.where(refresh[:, None, None], jnp.swapaxes(cav.rows.directions, 0, 1), state.directions)
    new_state = EPSites(damped, directions)
    add_shift, add_precision = sites.accumulate(directions, damped, y, refresh)
    sub_shift, sub_precision = sites.accumulate(state.directions, state.scalars, y, refresh)
    factor = params.factor
    new_factor = NaturalFactor(
        factor.shift + add_shift - sub_shift, factor.precision + add_precision - sub_precision
    )
    skipped = jnp.sum(mask & ~refresh)
    return params._replace(factor=new_factor), new_state, skipped


def site_factor(state: EPSites, y) -> NaturalFactor:
    """The per-class sums of all sites (eq. 25), to rebuild ``params.factor`` from scratch."""
    shift, precision = sites.accumulate(state.directions, state.scalars, y, jnp.ones(y.shape[0], bool))
    return NaturalFactor(shift, precision)


def global_energy(model: MultiClassGP, params: MultiClassParams):
    """``Σ_c g(q_c) − g(p_c)`` (eq. 60, first bracket); gradient: the prior term of eq. (10). Plus ``log p(θ)``
    with priors (the kernels' and the model's ``priors``)."""
    prior = model.prior_factors(params)
    q = bank.gaussians(prior, params.factor, 1.0)
    return with_log_prior(sep.hold_gradient(jnp.sum(q.log_normaliser), sep.prior_surrogate(prior, q)), params,
                          model.priors)


def local_energy(model: MultiClassGP, params: MultiClassParams, state: EPSites, x, y, mask):
    """``Σ_i mask_i Σ_{k≠y_i} log s̃_{i,k}`` with ``log s̃ = (1/α)[log Z_{i,k} + Σ_{c∈{y_i,k}} g(θ_c^∖) − g(θ_c)]``
    (eqs. 56–61, scalar form of Villacampa-Calvo & Hernández-Lobato 2017, eq. 9, App. F; Power EP as Bui, Yan & Turner 2017 eq. 110). Gradient: ``(1/α)∂log Z_{i,k}/∂ξ``
    with the cavity fixed (eq. 10)."""
    cav = _pair_cavities(model, params, state, x, y, hold=True)
    log_z = sites.log_partition(cav.label, cav.other, cav.label_fitc, cav.other_fitc, model.alpha,
                                label_noise=model.label_noise)
    terms = (log_z + jax.lax.stop_gradient(cav.label_change + cav.other_change)) / model.alpha
    energy = jnp.sum(jnp.where(sites.factor_mask(y, mask, model.num_classes), terms, 0.0))
    return sites.normalise_energy(energy, model.label_noise, model.num_classes, mask)


@partial(jax.jit, static_argnums=0)
def log_evidence(model: MultiClassGP, params: MultiClassParams, state: EPSites, x, y, mask=None):
    """``log Z_q`` (eq. 9) on the rows ``mask`` selects (None: all); differentiating it gives eq. (10). One
    compiled program (run eagerly, its few hundred array operations each compiled for the rows' shape: seconds
    on a first fit)."""
    mask = jnp.ones(y.shape[0], bool) if mask is None else mask
    return global_energy(model, params) + local_energy(model, params, state, x, y, mask)
