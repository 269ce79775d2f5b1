"""The mean functions the Power-EP sparse GPs and the collapsed regressor take (``mean_function=``,
``[model] mean_function``): :mod:`pep_gp.core.means` under the package's root.

Example:
    >>> from pep_gp.means import Linear
    >>> Linear(bias=1.0)
    Linear(bias=1)
"""

from .core.means import MEANS, Constant, InDataUnits, Linear, MeanFunction, Zero, from_dict, register_mean

__all__ = ["MEANS", "Constant", "InDataUnits", "Linear", "MeanFunction", "Zero", "from_dict", "register_mean"]
