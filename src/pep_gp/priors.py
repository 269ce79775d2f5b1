"""The priors the kernels' and likelihoods' ``prior=`` take (a MAP fit): :mod:`pep_gp.core.priors` under the
package's root.

Example:
    >>> from pep_gp.kernels import Matern52
    >>> from pep_gp.priors import Gamma
    >>> Matern52(lengthscales=0.5, prior={"lengthscales": Gamma(4.0, 4.0)})
    Matern52(lengthscales=0.5 (prior gamma), variance=1)
"""

from .core.priors import PRIORS, Gamma, HalfNormal, LogNormal

__all__ = ["PRIORS", "Gamma", "HalfNormal", "LogNormal"]
