"""The likelihood's parameters as settings: ``fixed=`` names those the fit must not move, spelled as a kernel's
``fixed=`` (:mod:`pep_gp.core.kernels`), and kept to the bit as the kernel's are (the optimiser's update of a
fixed leaf is zero, L-BFGS leaves it out of its vector).

A likelihood's parameters are named as its settings start them: the Gaussian's ``noise_variance``; the
Student-t's ``scale`` (started at ``√noise_variance``) and ``dof``; the negative binomial's ``dispersion``.
The Poisson, probit and logistic likelihoods have none.

Example:
    >>> from pep_gp.pipeline.models.sparse_gp import SparseGPRegressionSettings
    >>> SparseGPRegressionSettings(likelihood="student-t", fixed="dof").fixed
    ('dof',)
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field, model_validator

from .protocol import ModelSettings

LIKELIHOOD_PARAMETERS: dict[str, dict[str, str]] = {
    "gaussian": {"noise_variance": "raw_noise_variance"},
    "student-t": {"scale": "raw_scale", "dof": "raw_dof"},
    "poisson": {},
    "negative-binomial": {"dispersion": "raw_dispersion"},
}
"""Each likelihood's parameters by name, with the name of the leaf that stores each (softplus of it,
:mod:`pep_gp.core.likelihoods`)."""


def parameter_names(value: Any) -> tuple[str, ...]:
    """``fixed`` as a tuple of names: one name, or a list of them (as a kernel's ``fixed=`` takes them)."""
    return (value,) if isinstance(value, str) else tuple(value)


FixedNames = Annotated[tuple[str, ...], BeforeValidator(parameter_names)]
"""The ``fixed`` field of a model's settings (:func:`parameter_names`)."""


class LikelihoodParameterSettings(ModelSettings):
    """Settings of a model with likelihood parameters: ``fixed`` names those kept at their starting values.
    A subclass says which parameters its likelihood has (:meth:`likelihood_parameters`)."""

    fixed: FixedNames = Field((), description="the likelihood's parameters kept at their starting values, to the "
                              "bit (gaussian: noise_variance; student-t: scale, dof; negative-binomial: "
                              "dispersion); a kernel's go in the kernel (its fixed=)")

    def likelihood_parameters(self) -> dict[str, str]:
        """The likelihood's parameters by name, each with the name of its stored leaf."""
        return LIKELIHOOD_PARAMETERS[getattr(self, "likelihood", "gaussian")]

    def fixed_leaves(self) -> set[str]:
        """The stored leaves of the ``fixed`` parameters (what the spec's ``frozen`` holds)."""
        parameters = self.likelihood_parameters()
        return {parameters[name] for name in self.fixed}

    @model_validator(mode="after")
    def _names_known(self) -> "LikelihoodParameterSettings":
        parameters = self.likelihood_parameters()
        unknown = [name for name in self.fixed if name not in parameters]
        if unknown:
            likelihood = getattr(self, "likelihood", "gaussian")
            raise ValueError(f"names {unknown}, which likelihood {likelihood!r} does not have; its parameters are "
                             f"{list(parameters) or 'none'} (a kernel's are fixed in the kernel: fixed=)")
        return self
