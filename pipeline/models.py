"""The model registry: what ``pep train --model NAME`` builds, and how it meets the engine.

A :class:`ModelSpec` binds a model of :mod:`pepcore.models` to a store: it checks that the store fits
(task, number of classes), maps stored targets to model units, builds the static model object (which
provides the energy contract of DESIGN §2: ``global_energy(params, n_total)`` and
``local_energy(params, x, y, mask, n_total)``), initialises the params pytree from a sample of the
training rows, and gives the per-block held-out function whose sums become the metrics. The engine
only ever sees the per-block functions (:class:`DataTerm`, the held-out sums), never a model name.

To add a model, write a class with the methods of :class:`ModelSpec` and add an instance to
:data:`MODELS` (the multi-class specs of :mod:`pipeline.multiclass_models` are an example). A spec is
bound to what it needs of the training store (e.g. class counts) by ``bind(store_binding(store))``;
the binding is kept in checkpoint manifests. A model with EP-style moment matching also provides
``local_site_stats`` (summed per-row site updates) and ``site_update(params, stats, scale, damping)``;
the coordinator then gathers the statistics with :class:`SiteTerm`, applies the damped update, and only
then evaluates :class:`DataTerm` at the refined factor (seed001 §2.3: the gradient is taken with the new
factor; DESIGN §2, §4).

**Step-shared quantities** (an extension of DESIGN §2). When every block needs the same O(C·M³)
quantities (the multi-class model's ``chol(K_c)`` and cavities), recomputing them in every block
function, and again for the global term, costs more than the blocks' own O(rows·C·M²) work at small
minibatches. Such a model writes its energy as ``F = G(θ, S) + Σ_blocks L(θ, S; block)`` with
``S = step_shared(θ, n_total)`` and provides ``step_shared``, ``global_energy_shared(θ, S, n_total)``,
``local_energy_shared(θ, S, x, y, mask, n_total)`` (and, with site statistics,
``local_site_stats(θ, S, x, y, mask, n_total)`` and ``refresh_shared(θ, S, n_total)``: ``S`` after a
site update, which moves only the tied factor; the parts of ``S`` that depend on the factor must carry
no gradient, so the pullback taken before the update stays valid).
The coordinator computes ``S`` once per step with its pullback, the workers return ``∂L/∂θ`` and
``∂L/∂S``, and the coordinator forms ``dF/dθ = ∂G/∂θ + Σ∂L/∂θ + pullback(∂G/∂S + Σ∂L/∂S)`` — the chain
rule, so the gradient is that of the plain contract (tested). Models of the plain contract are seen
through :class:`Unshared` (``S = ()``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import log_ndtr

from pepcore.likelihoods import Gaussian, Probit
from pepcore.models.power_ep import PowerEPSparseGP, SparseGPParams
from pipeline.blocks import TargetScaling
from pipeline.config import TrainConfig
from pipeline.errors import InputError
from pipeline.metrics import classification_sums, regression_sums
from pipeline.multiclass_models import SPECS as MULTICLASS_SPECS, MultiClassSpec
from pipeline.stores import Store

# Initial noise variance of the Gaussian likelihood in standardised target units: var(y)/100, as the
# seed000 reference code.
INITIAL_NOISE_VARIANCE = 0.01
# Power of the binary and regression models when the config leaves it open: seed000 §5's compromise.
DEFAULT_ALPHA = 0.5


@dataclass(frozen=True)
class Unshared:
    """A model of the plain energy contract in the step-shared form (see the module docstring), with
    nothing shared: ``S = ()``."""

    model: Any

    def step_shared(self, params, n_total):
        return ()

    def global_energy_shared(self, params, shared, n_total):
        return self.model.global_energy(params, n_total)

    def local_energy_shared(self, params, shared, x, y, mask, n_total):
        return self.model.local_energy(params, x, y, mask, n_total)

    def local_site_stats(self, params, shared, x, y, mask, n_total):
        return self.model.local_site_stats(params, x, y, mask, n_total)

    def refresh_shared(self, params, shared, n_total):
        return ()

    def site_update(self, params, stats, scale, damping):
        return self.model.site_update(params, stats, scale, damping)


def shared_form(model: Any) -> Any:
    """``model`` in the step-shared form (itself if it has ``step_shared``, else :class:`Unshared`)."""
    return model if hasattr(model, "step_shared") else Unshared(model)


@dataclass(frozen=True)
class DataTerm:
    """The engine's training function on one block: the data term and its gradient w.r.t. the params
    and the step-shared quantities; its input is ``(params, shared)``. Hashable, so workers compile it
    once. ``model`` is in the step-shared form (:func:`shared_form`)."""

    model: Any
    n_total: int

    def __call__(self, inputs, x, y, mask):
        params, shared = inputs
        return jax.value_and_grad(self.model.local_energy_shared, argnums=(0, 1))(params, shared, x, y, mask,
                                                                                 self.n_total)


@dataclass(frozen=True)
class SiteTerm:
    """The engine's site-statistics function on one block, for models with EP-style updates; its input
    is ``(params, shared)`` like :class:`DataTerm`'s."""

    model: Any
    n_total: int

    def __call__(self, inputs, x, y, mask):
        params, shared = inputs
        return self.model.local_site_stats(params, shared, x, y, mask, self.n_total)


def has_sites(model: Any) -> bool:
    """Whether ``model`` moves a tied factor by EP-style site updates."""
    return hasattr(model, "local_site_stats")


@dataclass(frozen=True)
class ProbitHeldOut:
    """Per-block held-out sums of a probit classifier: ``log p(y|x) = log Φ(s m/√(1+v))``."""

    model: PowerEPSparseGP

    def __call__(self, params, x, y, mask):
        mean, var = self.model.predict_f(params, x)
        z = (2.0 * y - 1.0) * mean / jnp.sqrt(1.0 + var)
        return classification_sums(log_ndtr(z), z > 0, mask)


@dataclass(frozen=True)
class GaussianHeldOut:
    """Per-block held-out sums of a regressor, with predictions mapped back to target units."""

    model: PowerEPSparseGP
    targets: TargetScaling

    def __call__(self, params, x, y, mask):
        mean, var = self.model.predict_y(params, x)
        scale = self.targets.scale
        return regression_sums(mean * scale, var * scale**2, y * scale, mask)


@dataclass(frozen=True)
class ModelSpec:
    """A named Power-EP sparse GP bound to a task (see the module docstring for the protocol).

    Attributes:
        name: the ``--model`` name.
        task: the store task it trains on.
        description: one line for ``--help`` and reports.
    """

    name: str
    task: str
    description: str

    def check(self, store: Store) -> None:
        """Raise InputError unless ``store`` suits the model."""
        if store.task != self.task:
            raise InputError(f"{store.path}: --model {self.name} needs a {self.task} store; this store "
                             f"holds a {store.task} task")
        if self.task == "classification" and store.n_classes != 2:
            raise InputError(f"{store.path}: --model {self.name} is binary and needs 2 classes; this "
                             f"store has {store.n_classes} (for airline, ingest with --target delayed)")

    def store_binding(self, store: Store) -> dict[str, Any]:
        """What :meth:`bind` needs from the training store: nothing."""
        return {}

    def bind(self, binding: dict[str, Any]) -> "ModelSpec":
        """This spec (it depends on no store attributes)."""
        return self

    def targets(self, store: Store) -> TargetScaling:
        """Stored targets → model units: standardised regression targets, 0/1 labels as floats."""
        if self.task == "regression":
            return TargetScaling(float(store.attrs["y_mean"]), float(store.attrs["y_std"]))
        return TargetScaling()

    def model(self, config: TrainConfig) -> PowerEPSparseGP:
        """The static model object."""
        likelihood = Gaussian() if self.task == "regression" else Probit()
        alpha = DEFAULT_ALPHA if config.alpha is None else config.alpha
        return PowerEPSparseGP(likelihood, alpha=alpha, jitter=config.jitter)

    def init(self, model: PowerEPSparseGP, x: np.ndarray, config: TrainConfig) -> SparseGPParams:
        """Starting params from a sample ``x`` of standardised training inputs (k-means inducing
        inputs, median-distance lengthscales, unit kernel variance)."""
        if config.num_inducing > x.shape[0]:
            raise InputError(f"num_inducing = {config.num_inducing} exceeds the {x.shape[0]} training "
                             "rows available to place inducing inputs")
        likelihood = (Gaussian.init_params(INITIAL_NOISE_VARIANCE) if self.task == "regression"
                      else Probit.init_params())
        return model.init(x, config.num_inducing, variance=1.0, likelihood_params=likelihood,
                          seed=config.seed)

    def held_out(self, model: PowerEPSparseGP, targets: TargetScaling) -> Callable:
        """The per-block function whose sums give the held-out metrics (pipeline.metrics)."""
        return GaussianHeldOut(model, targets) if self.task == "regression" else ProbitHeldOut(model)

    def frozen(self, config: TrainConfig) -> Callable[[SparseGPParams], SparseGPParams] | None:
        """Which params leaves stay fixed (the inducing inputs unless ``train_inducing``)."""
        if config.train_inducing:
            return None
        return lambda p: jax.tree_util.tree_map(lambda _: False, p)._replace(inducing=True)


MODELS: dict[str, ModelSpec | MultiClassSpec] = {spec.name: spec for spec in (
    ModelSpec("sparse-gp-regressor", "regression",
              "Power-EP sparse GP regression (Gaussian likelihood, tied factor)"),
    ModelSpec("sparse-gp-classifier", "classification",
              "Power-EP sparse GP binary classification (probit likelihood, tied factor)"),
    *MULTICLASS_SPECS,
)}


def get_model(name: str) -> ModelSpec | MultiClassSpec:
    """The spec registered as ``name``; InputError listing the known names otherwise."""
    try:
        return MODELS[name]
    except KeyError:
        raise InputError(f"--model: unknown model {name!r}; expected one of {', '.join(MODELS)}") from None
