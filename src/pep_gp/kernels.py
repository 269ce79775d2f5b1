"""The covariance functions the estimators and ``pep train`` take (``kernel=``, ``[model.kernel]``), composed with
``+`` and ``*``: :mod:`pep_gp.core.kernels` under the package's root.

Example:
    >>> from pep_gp.kernels import Linear, Matern52
    >>> Matern52(lengthscales=0.5, variance=2.0, fixed=("lengthscales",)) + Linear()
    Matern52(lengthscales=0.5 (fixed), variance=2) + Linear(variance=1)
"""

from .core.kernels import (KERNELS, Constant, Kernel, Linear, Matern12, Matern32, Matern52, Periodic, Product,
                           RationalQuadratic, SquaredExponential, Sum, from_dict, parse)

__all__ = ["KERNELS", "Constant", "Kernel", "Linear", "Matern12", "Matern32", "Matern52", "Periodic", "Product",
           "RationalQuadratic", "SquaredExponential", "Sum", "from_dict", "parse"]
