"""What a model provides to the trainer: its mathematics (:class:`Energy`, from :mod:`pep_gp.core`) and
its binding to data and settings (:class:`ModelSpec`, one spec module per model in this package).

Every method here optimises an energy with tied factors, written in the *step-shared* form

    F(θ) = G(θ, S) + Σ_blocks L(θ, S; block),        S = step_shared(θ, N),

where ``S`` holds what every block of a step needs and costs O(G·M³) to compute (prior factors,
cavities); the trainer computes it once per step with its pullback, the blocks return ``∂L/∂θ`` and
``∂L/∂S``, and the chain rule gives ``dF/dθ`` (DESIGN §2; :mod:`pep_gp.pipeline.training.step`). A model with nothing to
share returns ``()``. Models with EP-style moment matching of the tied factor (seed001's SEP) declare
``has_sites = True`` in their spec and implement :class:`SiteUpdates`: per-block sums of refined site
statistics, reduced like gradients, and the damped update of the tied factor that they drive.
Capabilities are declared, never detected.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, runtime_checkable

import jax.numpy as jnp
import optax
from pydantic import BaseModel, ConfigDict, Field


class Energy(Protocol):
    """The energy contract (pure JAX, float64; ``x`` ``[B, D]``, ``y`` ``[B]`` float, ``mask`` ``[B]``)."""

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


class ModelSettings(BaseModel):
    """Settings every model section has (the ``[model]`` table of a training config); a model's own
    settings subclass it. Unknown keys and out-of-range values are refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_inducing: int = Field(200, ge=1, description="inducing points M (per latent GP)")
    train_inducing: bool = Field(True, description="optimise the inducing inputs")
    jitter: float = Field(1.4901161193847656e-08, ge=0.0, description="relative jitter on K_uu (pep_gp.core.linalg)")


class SiteSettings(ModelSettings):
    """Settings of a model with site updates (``has_sites``): the step ``ρ_t`` of the damped
    tied-factor update (spec seed001 §2.4)."""

    damping: float = Field(1.0, gt=0.0, le=1.0, description="SEP step ρ of the tied-factor update (1 with minibatches, seed001 §2.7)")
    damping_decay: float = Field(1.0, gt=0.0, le=1.0, description="ρ_t = ρ·decay^t (0.99: the full-batch schedule of spec §2.4)")
    damping_floor: float = Field(0.05, ge=0.0, le=1.0, description="ρ_t never falls below min(ρ, floor)")

    def damping_schedule(self) -> optax.Schedule:
        """``ρ_t = max(ρ·decay^t, min(ρ, floor))``. The floor keeps the factor tracking the hyper-parameters:
        their steps use the gradient as if EP had converged (spec §2.9), and with a factor frozen by the
        decay (ρ_t → 0) they drift from its fixed point — full-batch wine collapsed after ~550 steps at
        learning rate 0.05 (tests/pipeline/test_convergence.py)."""
        floor = min(self.damping, self.damping_floor)
        return lambda count: jnp.maximum(self.damping * self.damping_decay ** count, floor)


@runtime_checkable
class ModelSpec(Protocol):
    """A model as the trainer sees it: its name, task, settings, and how it binds to data.

    Attributes:
        name: the ``--model`` name.
        task: ``"classification"`` or ``"regression"``: the stores it trains on.
        description: one line for ``--help`` and reports.
        Settings: the pydantic class of its ``[model]`` settings (a :class:`ModelSettings`).
        has_sites: True when the model is a :class:`SiteUpdates` and each step first gathers site
            statistics and updates the tied factor (seed001 §2.3's order).
    """

    name: str
    task: str
    description: str
    Settings: type[ModelSettings]
    has_sites: bool

    def check(self, data: Any, settings: ModelSettings, block_rows: int) -> None:
        """Raise :class:`~pep_gp.pipeline.errors.InputError` unless the dataset (a store, or in-memory
        arrays, :mod:`pep_gp.pipeline.data.datasets`) suits the model."""

    def binding(self, data: Any) -> dict[str, Any]:
        """What the model needs of the training data (JSON; kept in checkpoints), e.g. class counts."""

    def build(self, settings: ModelSettings, binding: dict[str, Any]) -> Energy:
        """The static (hashable) model object."""

    def init(self, model: Energy, x: Any, settings: ModelSettings, seed: int) -> Any:
        """Starting params from a sample ``x`` of (standardised) training inputs."""

    def frozen(self, settings: ModelSettings, params: Any) -> Any:
        """A pytree like ``params`` of bools: True for leaves the optimiser must not move."""

    def targets(self, data: Any) -> Any:
        """Stored targets → model units (a :class:`~pep_gp.pipeline.data.blocks.TargetScaling`)."""

    def held_out(self, model: Energy, targets: Any) -> Callable:
        """The per-block function whose sums give the held-out metrics (:mod:`pep_gp.pipeline.training.metrics`)."""
