"""``multiclass-sep`` and ``multiclass-direct``: the multi-class GP classifier of Villacampa-Calvo &
Hernández-Lobato (2017) (:class:`pep_gp.core.models.multiclass.MultiClassGP`: C latent sparse GPs, one tied
factor per class, O(C·M²) state).

* ``multiclass-sep`` — the paper's SEP training (§2.3): each step first gathers the minibatch's summed
  site statistics and applies the damped tied-factor update, then takes the data term's gradient at the
  *refined* factor with the cavity held fixed (eqs. 10, 12) and an Adam step on the hyper-parameters and
  inducing inputs (the factor is frozen for Adam).
* ``multiclass-direct`` — the tied factor is a Cholesky factor and Adam ascends the exact gradient of
  the same energy w.r.t. everything (no site statistics).

The per-class factor counts ``n_c`` need the class frequencies of the training split: the binding holds
the training class counts (from a store's ``class_counts``, kept in checkpoints).

Every class's latent noise ``σ_{0,c}`` (on the diagonal of ``K_c`` and on ``κ_c``, eqs. 1–3) starts at
``class_noise``; ``fixed="class_noise"`` keeps it there to the bit and ``prior={"class_noise": …}`` puts a prior on
each class's ``σ_{0,c}`` (a MAP fit), as the single-output likelihoods' parameters
(:mod:`pep_gp.pipeline.models.likelihood_parameters`).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Literal

import numpy as np
from pydantic import Field, ValidationInfo, field_validator

from ...core.kernels import ProductDtype
from ...core.models.multiclass import MultiClassGP, MultiClassParams
from ...core.models.multiclass_likelihoods import check_likelihood
from ...core.models.multiclass_sites import check_label_noise
from ...core.parameters import LOG
from ..data.blocks import TargetScaling
from ..errors import InputError
from .predictive import MultiClassPredictive
from .likelihood_parameters import FixedNames, LikelihoodParameterSettings, PriorTable
from .protocol import SiteSettings, SpecBase, check_task, settings_kernel, settings_mean
from .registry import register
from .sparse_gp import check_inducing


AUTO_LIKELIHOOD = "pairwise"
"""What ``likelihood = "auto"`` takes: the paper's product of pairwise probits (eq. 6), with learned inducing
inputs, whose fit at the estimator's defaults takes seconds of CPU where the softmax's takes minutes. A softmax
row integrates each class's Gaussian–Gumbel convolution over breakpoints placed for every class, growing about
as C² where a pairwise row grows as C: 33× a pairwise step at 3 classes, 56× at 10
(``benchmarks/results/bench_multiclass_likelihoods.json``); at the defaults the softmax took 107 s on wine's 133
rows (the pairwise likelihood 6 s, the same test NLL), more than 600 s on satellite's first three classes (2,400
training rows) and more than 30 minutes on glass (171 rows, 6 classes), where the pairwise likelihood took 40 s
and 26 s of CPU (issue 63; ``docs/results/multiclass.md``). Before,
``auto`` took the softmax up to 50,000 training rows × classes² (every everyday table), for its calibration on
noisy labels: on carData's Chile survey the pairwise likelihood is 0.146 nats behind logistic regression, the
softmax 0.006 ahead; ``likelihood = "softmax"`` takes it at any size."""


CLASS_NOISE_DESCRIPTION = ("every class's latent noise σ_0,c, added to the diagonal of its K_uu and to κ "
                           "(Villacampa-Calvo & Hernández-Lobato 2017, eqs. 1–3)")
"""What ``fixed`` and ``prior`` say ``class_noise`` is (the multi-class deep GP's output GPs' too)."""

CLASS_NOISE_FORWARD = LOG.forward
"""The map from a stored ``σ_{0,c}`` (its logarithm, as the reference code stores it) to its value: what a prior on
``class_noise`` is a density of (:mod:`pep_gp.core.priors`)."""


class MultiClassSettings(LikelihoodParameterSettings, SiteSettings):
    """Settings of the multi-class models (the damping is used by ``multiclass-sep``).

    The tied factors' step decays by default by 0.99 per epoch (per pass over the training rows, down to the
    floor; :meth:`~pep_gp.pipeline.models.protocol.SiteSettings.damping_schedule`): undamped (ρ = 1)
    full-batch SEP beside Adam's steps on the hyper-parameters climbs to a peak of the energy and then falls
    away from it (on scikit-learn's digits the test NLL went from 0.125 at the peak to 0.51 by step 800),
    while the decaying step converges (``benchmarks/results/bench_estimators_defaults.json``). A minibatch
    fit takes many steps per epoch, so over the multi-class paper's 4 Fashion-MNIST epochs (300 steps each)
    ρ stays above 0.96, near the paper's undamped minibatch SEP (Villacampa-Calvo & Hernández-Lobato 2017):
    a decay of 0.99 per step had frozen the factor within the first epoch (13.77 % / 0.388 after 4), per
    epoch it ends at 13.34 % / 0.368 (``benchmarks/results/bench_fashion_mnist_default_damping.json``).
    """

    alpha: float = Field(1.0, gt=0.0, le=1.0, description="Power-EP power of the factors (1: the paper's EP)")
    label_noise: float = Field(0.0, ge=0.0, lt=1.0, description="ε of the label-noise factors ε + (1 − ε)Φ "
                               "(robust to mislabelled rows; 0: the paper's likelihood; > 0 needs alpha = 1)")
    likelihood: Literal["auto", "pairwise", "exact", "softmax"] = Field(
        "auto", description="what a row's factor is: pairwise, the product of its C − 1 pairwise probits (the "
        "paper's eq. 6); exact, the probability of the maximum (eq. 1), on which noisy labels do not push the fit "
        "to overconfidence; softmax, the multinomial logit exp(f_y)/Σ exp(f_k), logistic regression's link "
        "(both need alpha = 1); auto: pairwise (a softmax step costs "
        "~30–60× a pairwise one; softmax is the better calibrated on noisy labels)")
    train_inducing: bool | None = Field(None, description="optimise the inducing inputs; none: fixed with the "
                                        "softmax likelihood (learned ones overfit EP's energy on noisy tables), "
                                        "learned with the others")
    damping_decay: float = Field(0.99, gt=0.0, le=1.0, description="ρ_t = ρ·decay^(t/steps per epoch), never "
                                 "below the floor: the decay per pass over the training rows")
    kernel_products: ProductDtype = Field(
        "float64", description="dtype of the kernel's matrix products over the inputs; float32 halves that part "
        "of a step at large D (images), the EP algebra stays float64")
    class_noise: float = Field(1.0, gt=0.0, description="starting latent noise variance σ_0,c of every class "
                               "(Villacampa-Calvo & Hernández-Lobato 2017: 1); fixed/prior name it class_noise")
    fixed: FixedNames = Field((), description="class_noise: " + CLASS_NOISE_DESCRIPTION + ", kept at its start to the "
                              "bit; a kernel's go in the kernel (its fixed=)")
    prior: PriorTable = Field(None, description="a prior on each class's σ_0,c: {class_noise = {name = 'log-normal' | "
                              "'gamma' | 'half-normal', …}}; a MAP fit. A kernel's go in the kernel (its prior=)")

    takes_priors = True  # the kernel's prior= is added to the global energy (a MAP fit), once per class
    takes_mean = True  # one mean_function= per class (each its own parameters), carried to the sites and predictive
    leaf_forwards = MappingProxyType({"raw_noise": CLASS_NOISE_FORWARD})

    def likelihood_parameters(self) -> dict[str, str]:
        """``class_noise``, stored as ``raw_noise`` (:class:`~pep_gp.core.models.multiclass.MultiClassParams`), whatever
        the likelihood."""
        return {"class_noise": "raw_noise"}

    @field_validator("label_noise")
    @classmethod
    def _label_noise_needs_ep(cls, value: float, info: ValidationInfo) -> float:
        check_label_noise(info.data.get("alpha", 1.0), value)
        return value

    @field_validator("likelihood")
    @classmethod
    def _whole_row_needs_ep(cls, value: str, info: ValidationInfo) -> str:
        if value != "auto":
            check_likelihood(value, info.data.get("alpha", 1.0), info.data.get("label_noise", 0.0))
        return value

    def chosen(self) -> tuple["MultiClassSettings", tuple[str, ...]]:
        """These settings with ``likelihood = "auto"`` (:data:`AUTO_LIKELIHOOD`) and ``train_inducing = None``
        decided, the rest as they are, and a note for each decision."""
        likelihood, notes = self.likelihood, []
        if likelihood == "auto":
            likelihood = AUTO_LIKELIHOOD
            notes.append(f"likelihood = auto: {likelihood}")
        train = likelihood != "softmax" if self.train_inducing is None else self.train_inducing
        if self.train_inducing is None:
            notes.append(f"train_inducing = none: {str(train).lower()} (with the {likelihood} likelihood)")
        return self.model_copy(update={"likelihood": likelihood, "train_inducing": train}), tuple(notes)

    @property
    def is_chosen(self) -> bool:
        """Whether nothing is left to :meth:`chosen`."""
        return self.likelihood != "auto" and self.train_inducing is not None


@dataclass(frozen=True)
class MultiClassSpec(SpecBase):
    """The multi-class GP bound to a classification dataset; ``factor`` is ``"natural"`` (SEP, site
    updates) or ``"cholesky"`` (direct mode)."""

    factor: str = "natural"
    Settings = MultiClassSettings
    parameterisation = "3"  # 3: a kernel pytree (pep_gp.core.kernels); 1: log ℓ² lengthscales
    class_parallel = True  # its classes may be spread over the workers (protocol.spreads_classes)

    @property
    def has_sites(self) -> bool:
        return self.factor == "natural"

    def check(self, data: Any, settings: MultiClassSettings, block_rows: int) -> None:
        """A classification dataset with every class in the training split."""
        check_task(self, data)
        counts = data.attrs.get("class_counts") or {}
        if "train" not in counts:
            raise InputError(f"{data.path}: has no class_counts attribute (re-ingest it with `pep ingest`)")
        missing = [c for c, n in enumerate(counts["train"]) if n == 0]
        if missing:
            raise InputError(f"{data.path}: classes {missing} have no training rows; --model {self.name} needs "
                             "every class of 0..C-1 in the training split")

    def binding(self, data: Any) -> dict[str, Any]:
        return {"class_counts": [int(n) for n in data.attrs["class_counts"]["train"]]}

    def chosen(self, settings: MultiClassSettings, binding: dict[str, Any],
               train_rows: int) -> tuple[MultiClassSettings, tuple[str, ...]]:
        """The settings decided for a run, with a note for each decision (:meth:`MultiClassSettings.chosen`)."""
        return settings.chosen()

    def build(self, settings: MultiClassSettings, binding: dict[str, Any]) -> MultiClassGP:
        if not settings.is_chosen:
            raise InputError(f"--model {self.name}: likelihood = {settings.likelihood!r} and train_inducing = "
                             f"{settings.train_inducing!r} are decided when a run starts training, and this run "
                             "records neither: it was written by a pep that did not record them; retrain it")
        return MultiClassGP(len(binding["class_counts"]), alpha=settings.alpha, jitter=settings.jitter,
                            label_noise=settings.label_noise, likelihood=settings.likelihood,
                            kernel_products=settings.kernel_products, priors=settings.leaf_priors())

    def data_size(self, binding: dict[str, Any], n_total: int) -> np.ndarray:
        """``N_c``, the rows of each class ``[C]`` for ``n_total`` rows in the training split's class
        proportions (the factor counts' data, Villacampa-Calvo & Hernández-Lobato 2017, §2.3.1)."""
        counts = np.asarray(binding["class_counts"], dtype=np.float64)
        return n_total * (counts / counts.sum())

    def init(self, model: MultiClassGP, x, settings: MultiClassSettings, seed: int) -> MultiClassParams:
        """A random sample of ``M`` rows per class as inducing inputs; the settings' kernel for every class
        (default the ARD squared exponential of amplitude 1, lengthscales from the median distance); noise
        ``class_noise`` (default 1, the paper's §4 settings); the settings' mean function for every class (default
        zero)."""
        check_inducing(settings, x.shape[0])
        return model.init(x, settings.num_inducing, kernel=settings_kernel(settings), noise=settings.class_noise,
                          factor=self.factor, seed=seed, mean=settings_mean(settings))

    def predictive(self, model: MultiClassGP, targets: TargetScaling) -> Callable:
        return MultiClassPredictive(model)


SEP = register(MultiClassSpec("multiclass-sep", "classification", "multi-class GP classification, stochastic EP "
                              "with tied factors per class (Villacampa-Calvo & Hernández-Lobato 2017)", "natural"))
DIRECT = register(MultiClassSpec("multiclass-direct", "classification", "multi-class GP classification, Adam on "
                                 "the tied-factor energy for all parameters (direct mode)", "cholesky"))
