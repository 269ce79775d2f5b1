"""The collapsed PEP-α regression objective (Bui, Yan & Turner 2017, §3.2,
:class:`pep_gp.core.models.collapsed_regression.CollapsedRegression`) as a model of the trainer.

Its sites are integrated out in closed form, so the objective is not a sum over blocks: it trains
with the whole training split as one block (full batch), and it predicts from its training rows, so it
has no per-block predictive.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import Field

from ...core.initialisation import initial_kernel_and_inducing
from ...core.kernels import Kernel, SquaredExponential
from ...core.models.collapsed_regression import CollapsedRegression, RegressionParams
from ...core.parameters import on_device, unconstrained
from .likelihood_parameters import LikelihoodParameterSettings
from .protocol import InducingSettings, SpecBase, check_one_block, check_task, settings_kernel, settings_mean
from .sparse_gp import check_given_inducing, check_inducing


COLLAPSED_INDUCING = 200
"""The collapsed regressor's default ``num_inducing``. Its objective costs ``O(NM²)`` per evaluation, so on the
everyday tables (issue 63) 200 inducing inputs cost seconds, and up to 200 training rows they are the rows
themselves: the exact GP (:func:`~pep_gp.pipeline.runs.frame.capped_settings`). With the 50 of the other models
the sparse approximation, not the data, limited the fit: on concrete (824 training rows, 8 features) the test NLL
was 0.17 ± 0.04 nats worse than scikit-learn's exact GP; with 200 it is 0.05 ± 0.03 worse
(benchmarks/bench_everyday.py's split; on four other 80/20 splits 0.16 ± 0.02 at 50, 0.01 ± 0.02 at 200), the
fit's CPU seconds in a fresh process, compilation included, 9.0 instead of 6.8. Diabetes is unchanged; boston's
split is 0.51 ± 0.33 worse, two held-out rows far from every model's mean making up 0.44 of it (four other splits:
0.05 better). Where the rows are few and the inputs many the exact GP's lengthscales overfit, and so do 200
inducing inputs: on ISLR Hitters (210 rows, 19 inputs) the 90 % intervals hold 0.74–0.77 of held-out rows, as
scikit-learn's exact GP's (0.68–0.79), where 50 held 0.83–0.87."""


COLLAPSED_NOISE_VARIANCE = 0.1
"""The collapsed regressor's starting noise variance in standardised target units: a tenth of the training
targets' variance (GPflow and scikit-learn start at all of it). From the hundredth the other models start at
(:data:`~pep_gp.pipeline.models.sparse_gp.INITIAL_NOISE_VARIANCE`) L-BFGS first fits the targets with the
kernel, shortening every lengthscale, and on a table that is mostly noise it then raises the noise and leaves
the kernel there with its variance near zero, a local optimum of the evidence: on the first split of
``airline_delay`` (3,000 flights' arrival delays, benchmarks/bench_estimators.py) the log marginal
likelihood −15,750 and the test NLL 5.242, behind linear regression's 5.187; started at a tenth, −15,285 and
5.121. On boston, concrete and diabetes the start changes the fit's test NLL by less than 0.01. The multi-output
regressor starts every output's noise here too, so its independent outputs start where ``P`` collapsed fits do:
from the hundredth, on linnerud's Pulse (16 training rows, benchmarks/bench_multioutput.py) its test NLL was
5.64 ± 2.35 where the separate fits' was 3.39 ± 0.16 (measured once); from a tenth, 3.38 ± 0.15."""


class CollapsedSettings(LikelihoodParameterSettings, InducingSettings):
    """Settings of the collapsed regression objective (``inducing_points``: where the inducing inputs start;
    ``fixed = ["noise_variance"]`` keeps the noise at ``noise_variance``)."""

    num_inducing: int = Field(COLLAPSED_INDUCING, ge=1, description="inducing points M; capped by the training "
                              "rows, which are then the inducing inputs (the exact GP)")
    alpha: float = Field(0.5, ge=0.0, le=1.0, description="0: the VFE bound, 1: FITC")
    noise_variance: float = Field(COLLAPSED_NOISE_VARIANCE, gt=0.0, description="starting noise variance, in "
                                  "standardised target units (the training targets' variance is 1)")

    takes_priors = True  # the kernel's prior= and the noise's are added to the objective (a MAP fit)
    takes_mean = True  # a mean_function= is carried through the energy, the predictive and the draws


@dataclass(frozen=True)
class CollapsedRegressionSpec(SpecBase):
    """The spec of :class:`CollapsedRegression`."""

    Settings = CollapsedSettings
    parameterisation = "3"  # 3: a kernel pytree (pep_gp.core.kernels); 1: softplus lengthscales and variance

    def check(self, data: Any, settings: CollapsedSettings, block_rows: int) -> None:
        check_task(self, data)
        check_one_block(self, data, block_rows)
        check_given_inducing(data, settings)

    def build(self, settings: CollapsedSettings, binding: dict) -> CollapsedRegression:
        return CollapsedRegression(alpha=settings.alpha, jitter=settings.jitter, priors=settings.leaf_priors())

    def init(self, model: CollapsedRegression, x, settings: CollapsedSettings, seed: int, *, inducing=None,
             kernel: Kernel | None = None, noise_variance: float | None = None) -> RegressionParams:
        """k-means inducing inputs unless given (``inducing``, else ``inducing_points``), and ``kernel`` (default a squared exponential of variance 1)
        with the median distance for a lengthscale left unset, one per input (Bui et al. 2017, §7), and the
        settings' mean function (default zero)."""
        inducing = settings.inducing_points if inducing is None else inducing
        if inducing is None:
            check_inducing(settings, x.shape[0])
        lengthscales, _, z = initial_kernel_and_inducing(x, settings.num_inducing, inducing=inducing, seed=seed)
        kernel = kernel or settings_kernel(settings) or SquaredExponential()
        noise_variance = settings.noise_variance if noise_variance is None else noise_variance
        raw = unconstrained(RegressionParams, noise_variance=np.float64(noise_variance))
        return RegressionParams(kernel.bank(1, z.shape[1], lengthscales), **raw, inducing=on_device(z),
                                mean=settings_mean(settings).build(z.shape[1]))

    def predictive(self, model: CollapsedRegression, targets: Any) -> None:
        """None: predictions need the training rows (see the module docstring)."""
        return None


COLLAPSED = CollapsedRegressionSpec("collapsed-regressor", "regression",
                                    "collapsed Power-EP sparse GP regression (full batch)")
