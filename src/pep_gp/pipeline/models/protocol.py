"""What a model provides to the trainer and the estimators: its mathematics (:class:`Energy`, from
:mod:`pep_gp.core`) and its binding to data and settings (a spec: :class:`ModelSpec`, one spec module per
model in this package, built on :class:`SpecBase`).

Every method here optimises an energy with tied factors, written in the *step-shared* form

    F(θ) = G(θ, S) + Σ_blocks L(θ, S; block),        S = step_shared(θ, N),

where ``S`` holds what every block of a step needs and costs O(G·M³) to compute (prior factors,
cavities); the trainer computes it once per step with its pullback, the blocks return ``∂L/∂θ`` and
``∂L/∂S``, and the chain rule gives ``dF/dθ`` (:mod:`pep_gp.pipeline.training.step`). A model with nothing
to share returns ``()``. Models with EP-style moment matching of the tied factor (stochastic EP, Li et al.
2015; Villacampa-Calvo & Hernández-Lobato 2017, §2.3) declare ``has_sites = True`` in their spec and
implement :class:`SiteUpdates`: per-block sums of refined site statistics, reduced like gradients, and the
damped update of the tied factor that they drive. Capabilities are declared, never detected.

A spec is the only per-model face of pep: ``pep train --model NAME`` trains it, its estimator
(:mod:`pep_gp.pipeline.estimators`) takes exactly its settings as constructor arguments, and
``pep predict`` and the held-out metrics use its :meth:`~ModelSpec.predictive`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Annotated, Any, Callable, ClassVar, Protocol, runtime_checkable

import jax
import numpy as np
import optax
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from ...core.kernels import Kernel, from_dict, parse
from ...core.means import MeanFunction, Zero
from ...core.means import from_dict as mean_from_dict
from ...core.parameters import array_module, fixed_leaves

from ..data.blocks import TargetScaling
from ..data.validation import check_features
from ..errors import InputError
from .predictive import BinaryPredictive, GaussianPredictive


class Energy(Protocol):
    """The energy contract (pure JAX, float64; ``x`` ``[B, D]``, ``y`` ``[B]`` float, ``mask`` ``[B]``;
    ``n_total`` the training data's size as the model counts it, :meth:`ModelSpec.data_size`: ``N``, or the
    rows of each class ``[C]`` for the multi-class models)."""

    def step_shared(self, params: Any, n_total: Any) -> Any:
        """``S``: the quantities every block of a step needs (``()`` for none)."""

    def global_energy(self, params: Any, shared: Any, n_total: Any) -> Any:
        """``G(θ, S)``: the O(G·M³) global terms, independent of the rows."""

    def data_energy(self, params: Any, shared: Any, x: Any, y: Any, mask: Any) -> Any:
        """``L(θ, S; block)``: the data term of one block; rows with ``mask = False`` add exactly 0."""


class SiteUpdates(Energy, Protocol):
    """An :class:`Energy` whose tied factor moves by damped EP-style updates."""

    def site_stats(self, params: Any, shared: Any, x: Any, y: Any, mask: Any) -> Any:
        """Sums over the block's rows of refined site statistics (they reduce like gradients)."""

    def site_update(self, params: Any, shared: Any, stats: Any, n_total: Any, damping: Any) -> tuple[Any, Any, Any]:
        """``(params, shared, accepted)``: the tied factor moved towards the summed statistics with step
        ``damping``, ``shared`` refreshed to it; a non-finite result is rejected (``accepted`` False)."""


def kernel_description(value: Any) -> dict[str, Any] | None:
    """A kernel setting as its JSON description (:meth:`~pep_gp.core.kernels.Kernel.to_dict`): from a kernel
    object, a description table (``[model.kernel]``) or a spelling such as ``"matern52+linear"``
    (:func:`~pep_gp.core.kernels.parse`); None is the model's default kernel."""
    if value is None:
        return None
    kernel = parse(value) if isinstance(value, str) else from_dict(value)
    return kernel.to_dict()


KernelSetting = Annotated[dict[str, Any] | None, BeforeValidator(kernel_description)]
"""The ``kernel`` field of a model's settings (:func:`kernel_description`)."""


def settings_kernel(settings: "ModelSettings") -> Kernel | None:
    """The kernel object of ``settings.kernel`` (None: the model's default)."""
    return None if settings.kernel is None else from_dict(settings.kernel)


def mean_description(value: Any) -> dict[str, Any] | None:
    """A ``mean_function`` setting as its JSON description (:meth:`~pep_gp.core.means.MeanFunction.to_dict`): from
    a mean-function object, a description table (``[model.mean_function]``) or a registered name such as
    ``"linear"``; None (and the zero mean) is the model's zero mean."""
    if value is None:
        return None
    mean = mean_from_dict(value)
    return None if isinstance(mean, Zero) else mean.to_dict()


MeanSetting = Annotated[dict[str, Any] | None, BeforeValidator(mean_description)]
"""The ``mean_function`` field of a model's settings (:func:`mean_description`)."""


def described_mean(description: dict[str, Any] | None) -> MeanFunction:
    """The mean-function object of a :data:`MeanSetting`'s value (:class:`~pep_gp.core.means.Zero` when None)."""
    return Zero() if description is None else mean_from_dict(description)


def settings_mean(settings: "ModelSettings") -> MeanFunction:
    """The mean-function object of ``settings.mean_function`` (:class:`~pep_gp.core.means.Zero` when None)."""
    return described_mean(settings.mean_function)


class ModelSettings(BaseModel):
    """Settings every model section has (the ``[model]`` table of a training config); a model's own
    settings subclass it. Unknown keys and out-of-range values are refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_inducing: int = Field(50, ge=1, description="inducing points M (per latent GP); capped by the training rows")
    train_inducing: bool = Field(True, description="optimise the inducing inputs")
    jitter: float = Field(1.4901161193847656e-08, ge=0.0, description="relative jitter on K_uu")
    kernel: KernelSetting = Field(None, description="the covariance function: a spelling such as 'matern52+linear', "
                                  "a [model.kernel] table or a pep_gp.kernels object; none: the squared exponential")
    mean_function: MeanSetting = Field(None, description="the prior's mean, in standardised units: 'constant', "
                                       "'linear', a [model.mean_function] table or a pep_gp.means object; none: zero")

    takes_mean: ClassVar[bool] = False
    """Whether the model carries a mean function (every built-in model does); a model whose settings do not refuse
    one other than zero."""

    at_the_rows: ClassVar[Mapping[str, Any]] = MappingProxyType({})
    """Settings the trainer imposes when the inducing inputs are the training inputs (``num_inducing`` capped
    by the rows, :func:`~pep_gp.pipeline.runs.frame.capped_settings`): none by default."""

    takes_priors: ClassVar[bool] = False
    """Whether the model adds priors on its parameters to its energy (a MAP fit, :mod:`pep_gp.core.priors`): a
    kernel with a ``prior`` is refused by the models that do not."""

    def fixed_leaves(self) -> set[str]:
        """The stored leaves these settings keep at their starting values (:meth:`SpecBase.frozen`): none here;
        a likelihood's ``fixed`` parameters (:mod:`pep_gp.pipeline.models.likelihood_parameters`)."""
        return set()

    @model_validator(mode="after")
    def _priors_taken(self) -> "ModelSettings":
        if (self.kernel is not None and not self.takes_priors
                and any(term.prior for term in from_dict(self.kernel).terms())):
            raise ValueError("kernel: this model takes no priors (its settings do not set takes_priors; every "
                             "built-in model does); leave out the kernel's prior=")
        return self

    @field_validator("mean_function")
    @classmethod
    def _carried(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and not cls.takes_mean:
            raise ValueError("this model takes the zero mean only (its settings do not set takes_mean; every "
                             "built-in model does); leave out mean_function")
        return value

    def __hash__(self) -> int:
        """Settings key compiled programs: hashed by their JSON (the kernel's description is a table)."""
        return hash(self.model_dump_json())

    def in_model_units(self, x_mean: Any, x_std: Any) -> "ModelSettings":
        """These settings as the spec's ``init`` takes them, where the inputs are standardised with ``x_mean``
        and ``x_std``: the same, unless a setting is in the inputs' units (:class:`InducingSettings`)."""
        return self


def inducing_table(value: Any) -> list[list[float]] | None:
    """``inducing_points`` as a JSON table (``M`` rows of ``D`` numbers): refused unless a 2-D array of finite
    numbers (:func:`~pep_gp.pipeline.data.validation.check_features`)."""
    return None if value is None else check_features(value, "inducing_points").tolist()


InducingPoints = Annotated[list[list[float]] | None, BeforeValidator(inducing_table)]
"""The ``inducing_points`` field of a model's settings (:func:`inducing_table`)."""


class InducingSettings(ModelSettings):
    """Settings of a model with one set of inducing inputs, which a user may place: ``inducing_points``
    (``[M, D]``, in the inputs' own units; the trainer standardises them like the inputs,
    :meth:`in_model_units`). Given, they set ``M``: ``num_inducing`` is then their number (left at its
    default it is replaced; another value is refused), and they are not capped by the training rows but
    refused when more (:func:`~pep_gp.pipeline.data.validation.check_num_inducing`)."""

    inducing_points: InducingPoints = Field(None, description="starting inducing inputs [M, D] in the inputs' own "
                                            "units (standardised like them); M is then num_inducing; none: k-means")

    @field_validator("inducing_points")
    @classmethod
    def _as_many_as_num_inducing(cls, value: list[list[float]] | None, info: ValidationInfo):
        count = info.data.get("num_inducing")
        if value is not None and count not in (len(value), cls.model_fields["num_inducing"].default):
            raise ValueError(f"{len(value)} rows, but num_inducing = {count} (leave num_inducing out: it is "
                             "their number)")
        return value

    @model_validator(mode="after")
    def _count_given_inducing_points(self) -> "InducingSettings":
        if self.inducing_points is not None:
            object.__setattr__(self, "num_inducing", len(self.inducing_points))  # frozen: set while validating
        return self

    def in_model_units(self, x_mean: Any, x_std: Any) -> "InducingSettings":
        """These settings with ``inducing_points`` standardised as the inputs are, ``(Z − x_mean)/x_std``:
        what the spec's ``init`` places (it sees standardised inputs only)."""
        if self.inducing_points is None:
            return self
        z = (np.asarray(self.inducing_points) - np.asarray(x_mean)) / np.asarray(x_std)
        return self.model_copy(update={"inducing_points": z.tolist()})


class SiteSettings(ModelSettings):
    """Settings of a model with site updates (``has_sites``): the step ``ρ_t`` of the damped tied-factor
    update (Villacampa-Calvo & Hernández-Lobato 2017, §2.3)."""

    damping: float = Field(1.0, gt=0.0, le=1.0, description="SEP step ρ of the tied-factor update (1 with minibatches)")
    damping_decay: float = Field(1.0, gt=0.0, le=1.0, description="ρ_t = ρ·decay^(t/steps per epoch): the decay per "
                                 "epoch (pass over the training rows)")
    damping_floor: float = Field(0.05, ge=0.0, le=1.0, description="ρ_t never falls below min(ρ, floor)")

    def damping_schedule(self, steps_per_epoch: int) -> optax.Schedule:
        """``ρ_t = max(ρ·decay^(t/E), min(ρ, floor))`` at step ``t`` of ``E = steps_per_epoch``: the step decays
        by the fraction of the training rows seen, so a full-batch fit (``E = 1``) and a minibatch fit of
        the same data decay alike per pass over it (a decay per step froze the factor of a 300-step epoch
        after one epoch). The floor keeps the factor tracking the hyper-parameters:
        their steps use the gradient as if EP had converged, and with a factor frozen by the decay
        (ρ_t → 0) they drift from its fixed point — full-batch wine collapsed after ~550 steps at
        learning rate 0.05 (tests/pipeline/test_convergence.py)."""
        floor = min(self.damping, self.damping_floor)
        per_step = self.damping_decay ** (1.0 / steps_per_epoch)
        return lambda count: array_module(count).maximum(self.damping * per_step ** count, floor)


@runtime_checkable
class ModelSpec(Protocol):
    """A model as the trainer, the estimators and ``pep predict`` see it: its name, task, settings, and
    how it binds to data (:class:`SpecBase` gives the parts most models share).

    Attributes:
        name: the ``--model`` name.
        task: ``"classification"`` or ``"regression"``: the stores it trains on.
        description: one line for ``--help`` and reports.
        Settings: the pydantic class of its ``[model]`` settings (a :class:`ModelSettings`).
        has_sites: True when the model is a :class:`SiteUpdates` and each step first gathers site
            statistics and updates the tied factor.
        parameterisation: a tag of how ``params`` stores the model (changed whenever a stored array means
            something else); run directories record it and a run of another tag is refused.
        train_defaults: :class:`~pep_gp.pipeline.runs.config.TrainConfig` fields whose default differs
            for this model (a config, ``pep train``'s options and the estimator's arguments override them).
    """

    name: str
    task: str
    description: str
    Settings: type[ModelSettings]
    has_sites: bool
    parameterisation: str
    train_defaults: Mapping[str, Any]

    def check(self, data: Any, settings: ModelSettings, block_rows: int) -> None:
        """Raise :class:`~pep_gp.pipeline.errors.InputError` unless the dataset (a store, or in-memory
        arrays, :mod:`pep_gp.pipeline.data.datasets`) suits the model."""

    def binding(self, data: Any) -> dict[str, Any]:
        """What the model needs of the training data (JSON; kept in checkpoints), e.g. class counts."""

    def build(self, settings: ModelSettings, binding: dict[str, Any]) -> Energy:
        """The static (hashable) model object."""

    def data_size(self, binding: dict[str, Any], n_total: int) -> Any:
        """The data's size as the model's energy takes it (its ``n_total`` argument) for ``n_total``
        training rows: an argument of the compiled programs, never a constant of them, so that data of one
        shape share them."""

    def init(self, model: Energy, x: Any, settings: ModelSettings, seed: int) -> Any:
        """Starting params from a sample ``x`` of (standardised) training inputs."""

    def frozen(self, settings: ModelSettings, params: Any) -> Any:
        """A pytree like ``params`` of bools: True for leaves the optimiser must not move."""

    def targets(self, data: Any, settings: ModelSettings | None = None) -> TargetScaling:
        """Stored targets → model units (which may depend on the settings, e.g. counts are kept as they are)."""

    def predictive(self, model: Energy, targets: TargetScaling) -> Callable:
        """``predict(params, x) -> dict`` on standardised rows ``x`` (:mod:`pep_gp.pipeline.models.predictive`):
        ``{"log_proba": [B, C]}`` for classification, ``{"mean": [B], "var": [B]}`` in target units for
        regression; jit-able, so it runs per block on the engine like the held-out metrics it gives."""


def check_one_block(spec: Any, data: Any, block_rows: int) -> None:
    """A model that conditions on its whole training split at once (the collapsed bound, the multi-output bound)
    reads it as one block: refused in one line, with the setting that fixes it, where ``block_rows`` is fewer."""
    rows = data.n_rows("train")
    if block_rows < rows:
        raise InputError(f"{data.path}: --model {spec.name} needs the whole training split in one block; "
                         f"block_rows is {block_rows} for {rows} rows (give --set block_rows={rows})")


def check_task(spec: Any, data: Any, n_classes: int | None = None) -> None:
    """InputError unless ``data`` holds ``spec``'s task with one target per row (and, for a binary model,
    2 classes)."""
    if data.task != spec.task:
        raise InputError(f"{data.path}: --model {spec.name} needs a {spec.task} store; this store holds a "
                         f"{data.task} task")
    if getattr(data, "n_targets", 1) > 1:
        raise InputError(f"{data.path}: holds {data.n_targets} targets per row ({', '.join(map(repr, data.target_names))}); "
                         f"--model {spec.name} fits one (MultiOutputGPRegressor fits several)")
    if n_classes is not None and data.n_classes != n_classes:
        raise InputError(f"{data.path}: --model {spec.name} is binary and needs 2 classes; this store has "
                         f"{data.n_classes} (for airline, ingest with --target delayed)")


def uses_site_updates(spec: Any, settings: ModelSettings) -> bool:
    """Whether a job's tied factor moves by site updates: the spec's ``has_sites``, unless its settings turn
    them off (a spec's optional ``site_updates(settings)``, e.g. the sparse-GP regressor with a likelihood
    whose sites are not exact)."""
    return spec.has_sites and getattr(spec, "site_updates", lambda _: True)(settings)


def spreads_classes(spec: Any, settings: ModelSettings) -> bool:
    """Whether a job may spread its model's classes over the workers (``parallel_over = "classes"``,
    :mod:`~pep_gp.pipeline.training.class_parallel`): the spec's optional ``class_parallel`` (its model's
    classes are coupled only through ``[B, C]`` numbers a step: the multi-class GP, Villacampa-Calvo &
    Hernández-Lobato 2017, eq. 6), and only with site updates (:func:`uses_site_updates`)."""
    return getattr(spec, "class_parallel", False) and uses_site_updates(spec, settings)


def chosen_settings(spec: Any, settings: ModelSettings, binding: dict[str, Any],
                    train_rows: int) -> tuple[ModelSettings, tuple[str, ...]]:
    """``(settings, notes)``: ``settings`` with what they leave to the data decided for a training split of
    ``train_rows`` rows bound as ``binding``, and a note for each decision, by the spec's optional
    ``chosen(settings, binding, train_rows)`` (the multi-class ``likelihood = "auto"``,
    :class:`~pep_gp.pipeline.models.multiclass.MultiClassSettings`); as they are for a spec without one. A run
    records the result, so it resumes, predicts and loads with what it trained on."""
    choose = getattr(spec, "chosen", None)
    return (settings, ()) if choose is None else choose(settings, binding, train_rows)


def leaves_named(params: Any, names: set[str]) -> Any:
    """A pytree like ``params``: True for leaves under a field called one of ``names`` (at any depth), and for
    the kernel's hyper-parameters marked fixed (:func:`~pep_gp.core.parameters.fixed_leaves`)."""
    def marked(path, _):
        return any(getattr(key, "name", getattr(key, "key", None)) in names for key in path)
    return jax.tree_util.tree_map(lambda a, b: a or b, jax.tree_util.tree_map_with_path(marked, params),
                                  fixed_leaves(params))


@dataclass(frozen=True)
class SpecBase:
    """What most specs share: a task check (binary models set ``n_classes = 2``), no binding, targets
    standardised for regression, Adam on every leaf but the inducing inputs unless ``train_inducing``
    (and the tied factor of a model with site updates, which moves by EP), and the task's predictive
    (a Gaussian ``predict_y`` or a probit ``predict_f``). A spec adds ``build`` and ``init``."""

    name: str
    task: str
    description: str
    Settings: ClassVar[type[ModelSettings]] = ModelSettings
    has_sites: ClassVar[bool] = False
    n_classes: ClassVar[int | None] = None
    parameterisation: ClassVar[str] = "1"
    train_defaults: ClassVar[Mapping[str, Any]] = MappingProxyType({})

    def check(self, data: Any, settings: ModelSettings, block_rows: int) -> None:
        check_task(self, data, self.n_classes)

    def binding(self, data: Any) -> dict[str, Any]:
        return {}

    def data_size(self, binding: dict[str, Any], n_total: int) -> Any:
        """``N``, the training rows, as a float64 scalar."""
        return np.float64(n_total)

    def targets(self, data: Any, settings: ModelSettings | None = None) -> TargetScaling:
        """Standardised regression targets (the training split's mean and deviation); labels as they are."""
        if self.task == "regression":
            return TargetScaling(float(data.attrs["y_mean"]), float(data.attrs["y_std"]))
        return TargetScaling()

    def frozen(self, settings: ModelSettings, params: Any) -> Any:
        fixed = (set() if settings.train_inducing else {"inducing"}) | settings.fixed_leaves()
        return leaves_named(params, fixed | ({"factor"} if self.has_sites else set()))

    def predictive(self, model: Energy, targets: TargetScaling) -> Callable:
        return GaussianPredictive(model, targets) if self.task == "regression" else BinaryPredictive(model)
