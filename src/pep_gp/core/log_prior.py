"""The log prior of a model's parameters, the term a MAP fit adds to its energy once per step
(:mod:`pep_gp.core.priors` for the convention: densities of the stored, unconstrained values).

Two kinds of parameters carry priors: a kernel's, which the kernel itself carries (its static ``prior``,
:meth:`~pep_gp.core.kernels.Kernel.log_prior`), found wherever a kernel sits in the params; and leaves stored
as a softplus (the likelihoods' parameters, :mod:`pep_gp.core.likelihoods`), named by the model's ``priors``
(``(leaf name, prior)`` pairs; the name is a field or key at any depth of the params). A pair may name a third
item, the elementwise map from the leaf to the values the prior is a density of when that is not the softplus
of the whole leaf (the ordinal's cut points: :meth:`~pep_gp.core.ordinal.Ordinal.gaps`).
"""

from __future__ import annotations

from typing import Any

import jax

from .kernels import Kernel
from .parameters import SOFTPLUS
from .priors import log_density


def log_prior(params: Any, leaf_priors: tuple[tuple, ...] = ()):
    """``Σ log p`` over the kernels' priors in ``params`` and the leaves ``leaf_priors`` names (``(leaf, prior)``,
    the leaf a softplus, or ``(leaf, prior, forward)``); None when there are none."""
    terms = []
    for path, node in jax.tree_util.tree_flatten_with_path(params, is_leaf=lambda n: isinstance(n, Kernel))[0]:
        if isinstance(node, Kernel):
            kernel_term = node.log_prior()
            terms += [] if kernel_term is None else [kernel_term]
            continue
        names = {getattr(key, "name", getattr(key, "key", None)) for key in path}
        terms += [log_density(prior, forward[0] if forward else SOFTPLUS.forward, node)
                  for leaf, prior, *forward in leaf_priors if leaf in names]
    return sum(terms[1:], terms[0]) if terms else None


def with_log_prior(value, params: Any, leaf_priors: tuple[tuple, ...] = ()):
    """``value + log p(θ)`` (:func:`log_prior`); ``value`` itself, the same bits, without priors."""
    term = log_prior(params, leaf_priors)
    return value if term is None else value + term
