"""The likelihood's parameters as settings: ``fixed=`` names those the fit must not move, spelled as a kernel's
``fixed=`` (:mod:`pep_gp.core.kernels`), and kept to the bit as the kernel's are (the optimiser's update of a
fixed leaf is zero, L-BFGS leaves it out of its vector); ``prior=`` puts priors on them, spelled as a
kernel's ``prior=`` (a table of parameter name → prior, :mod:`pep_gp.core.priors`), added to the energy once
per step (:mod:`pep_gp.core.log_prior`).

A likelihood's parameters are named as its settings start them: the Gaussian's ``noise_variance``; the
Student-t's ``scale`` (started at ``√noise_variance``) and ``dof``; the negative binomial's ``dispersion``.
The ordinal's ``cut_points`` are all held together (their stored leaf is one), and a prior on them is a density
of each gap between consecutive cut points (:meth:`~pep_gp.core.ordinal.Ordinal.gaps`). The Poisson, probit and
logistic likelihoods have none. The multi-class models' ``class_noise`` is every class's latent noise ``σ_{0,c}``
(stored as its logarithm; one leaf of ``C`` values, held together, a prior on each;
:mod:`pep_gp.pipeline.models.multiclass`).

Example:
    >>> from pep_gp.pipeline.models.sparse_gp import SparseGPRegressionSettings
    >>> SparseGPRegressionSettings(likelihood="student-t", fixed="dof").fixed
    ('dof',)
    >>> SparseGPRegressionSettings(prior={"noise_variance": {"name": "gamma", "shape": 2.0, "rate": 20.0}}).leaf_priors()
    (('raw_noise_variance', Gamma(shape=2.0, rate=20.0)),)
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Annotated, Any, Callable, ClassVar, Mapping

from pydantic import BeforeValidator, Field, model_validator

from ...core.priors import prior_from_dict, prior_to_dict
from .protocol import ModelSettings

LIKELIHOOD_PARAMETERS: dict[str, dict[str, str]] = {
    "gaussian": {"noise_variance": "raw_noise_variance"},
    "student-t": {"scale": "raw_scale", "dof": "raw_dof"},
    "poisson": {},
    "negative-binomial": {"dispersion": "raw_dispersion"},
    "ordinal": {"cut_points": "raw_cut_points"},
}
"""Each likelihood's parameters by name, with the name of the leaf that stores each (softplus of it,
:mod:`pep_gp.core.likelihoods`)."""


def parameter_names(value: Any) -> tuple[str, ...]:
    """``fixed`` as a tuple of names: one name, or a list of them (as a kernel's ``fixed=`` takes them)."""
    return (value,) if isinstance(value, str) else tuple(value)


FixedNames = Annotated[tuple[str, ...], BeforeValidator(parameter_names)]
"""The ``fixed`` field of a model's settings (:func:`parameter_names`)."""


def prior_table(value: Any) -> dict[str, dict[str, Any]] | None:
    """``prior`` as JSON: parameter name → the prior's description (:func:`~pep_gp.core.priors.prior_to_dict`),
    from priors or their descriptions (ValueError naming a bad one)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"a table of parameter name → prior; got {value!r}")
    return {name: prior_to_dict(prior_from_dict(prior)) for name, prior in value.items()}


PriorTable = Annotated[dict[str, dict[str, Any]] | None, BeforeValidator(prior_table)]
"""The ``prior`` field of a model's settings (:func:`prior_table`)."""


class LikelihoodParameterSettings(ModelSettings):
    """Settings of a model with likelihood parameters: ``fixed`` names those kept at their starting values,
    ``prior`` gives priors on some. A subclass says which parameters its likelihood has
    (:meth:`likelihood_parameters`)."""

    fixed: FixedNames = Field((), description="the likelihood's parameters kept at their starting values, to the "
                              "bit (gaussian: noise_variance; student-t: scale, dof; negative-binomial: "
                              "dispersion; ordinal: cut_points); a kernel's go in the kernel (its fixed=)")
    prior: PriorTable = Field(None, description="priors on the likelihood's parameters (those fixed names): a table "
                              "of name → {name = 'log-normal' | 'gamma' | 'half-normal', …}; a MAP fit (ordinal: "
                              "cut_points, a prior on each gap between them). A kernel's go in the kernel (its "
                              "prior=)")

    leaf_forwards: ClassVar[Mapping[str, Callable]] = MappingProxyType({})
    """Stored leaf → the elementwise map from it to the values its prior is a density of, for a leaf that is not
    a softplus of them (:mod:`pep_gp.core.log_prior`): the ordinal's gaps, the multi-class noise's ``exp``."""

    def likelihood_name(self) -> str:
        """The likelihood's name (its ``likelihood`` setting; the Gaussian when the model has none)."""
        return getattr(self, "likelihood", "gaussian")

    def likelihood_parameters(self) -> dict[str, str]:
        """The likelihood's parameters by name, each with the name of its stored leaf."""
        return LIKELIHOOD_PARAMETERS[self.likelihood_name()]

    def fixed_leaves(self) -> set[str]:
        """The stored leaves of the ``fixed`` parameters (what the spec's ``frozen`` holds)."""
        parameters = self.likelihood_parameters()
        return {parameters[name] for name in self.fixed}

    def leaf_priors(self) -> tuple[tuple[str, Any], ...]:
        """``prior`` as the model's ``priors``: ``(stored leaf, prior)`` pairs in parameter order, with the leaf's
        map (:attr:`leaf_forwards`) where it has one."""
        parameters, given = self.likelihood_parameters(), self.prior or {}
        return tuple((leaf, prior_from_dict(given[name]), *([self.leaf_forwards[leaf]] if leaf in self.leaf_forwards
                                                             else []))
                     for name, leaf in parameters.items() if name in given)

    @model_validator(mode="after")
    def _names_known(self) -> "LikelihoodParameterSettings":
        parameters = self.likelihood_parameters()
        for field, names in (("fixed", self.fixed), ("prior", list(self.prior or {}))):
            unknown = [name for name in names if name not in parameters]
            if unknown:
                likelihood = self.likelihood_name()
                raise ValueError(f"{field} names {unknown}, which likelihood {likelihood!r} does not have; its "
                                 f"parameters are {list(parameters) or 'none'} (a kernel's go in the kernel: "
                                 f"{field}=)")
        return self
