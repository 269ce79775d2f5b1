"""The training configuration (DESIGN §7): a validated pydantic model, loadable from TOML.

Defaults follow the papers where they state a setting: M = 200 inducing points and optax Adam with its
default moments (seed001 §3, "ADAM default", M = 200 for MNIST/airline), and α left to the model: 0.5
for the binary and regression sparse GPs (seed000 §5: a good compromise between the VFE and EP limits),
1 for the multi-class ones (the paper's SEP). Two settings are pep's own, because the papers' single-
machine protocol (minibatch S = 200, one update per minibatch) would leave a distributed engine idle:
``batch_size`` = 10,000 rows per step (the data terms of each step are spread over the workers in
``block_rows`` blocks) and ``learning_rate`` = 0.01 (Adam's 1e-3 moves the tied factor's natural
parameters, which are O(N), too slowly at a few hundred steps per epoch).

Example ``train.toml``::

    num_inducing = 100
    epochs = 5
    batch_size = 5000
    learning_rate = 0.02
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from pipeline.errors import InputError

# Fields that do not change the optimisation trajectory: they may differ when a run is resumed
# (``epochs`` only without the cosine schedule, whose decay is spread over all the steps).
RESUMABLE_FIELDS = frozenset({"epochs", "checkpoint_every", "keep_checkpoints"})


class TrainConfig(BaseModel):
    """Everything that determines a training run besides the model name and the data.

    Attributes:
        num_inducing: inducing points M.
        alpha: the Power-EP power in [0, 1] (0: VFE limit, 1: EP); None: the model's default (0.5 for
            the binary and regression sparse GPs, seed000 §5; 1 for the multi-class models, seed001).
        train_inducing: optimise the inducing inputs (else only hyper-parameters and the tied factor).
        jitter: relative jitter on ``K_uu`` (pepcore.linalg).
        learning_rate: Adam's initial step size.
        lr_schedule: ``constant``; ``cosine`` (decays to ``lr_final_fraction`` of it at the last
            step); ``exponential`` (multiplied by ``lr_decay`` every epoch).
        lr_decay, lr_final_fraction: parameters of the schedules above.
        epochs: passes over the training split.
        batch_size: training rows per step (rounded up to whole blocks); larger than the split means
            full-batch steps.
        block_rows: rows per block, the engine's unit of work (static shape, compiled once).
        standardize: standardise the inputs with the training split's per-feature mean and standard
            deviation (DESIGN §3); False feeds the stored values as they are (seed001's MNIST driver only
            divides the pixels by 255, which `pep ingest` already does; per-pixel standardisation would
            blow up the near-constant border pixels).
        damping: step ρ ∈ (0, 1] of damped tied-factor updates for methods with EP-style site
            statistics (seed001 §2.7: ρ = 1, no damping, with minibatches).
        seed: seed of the initialisation and of the minibatch order.
        checkpoint_every: steps between checkpoints (one is always written at the end).
        keep_checkpoints: complete checkpoints kept (older ones are pruned).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_inducing: int = Field(200, ge=1)
    alpha: float | None = Field(None, ge=0.0, le=1.0)
    train_inducing: bool = True
    jitter: float = Field(1.4901161193847656e-08, gt=0.0)
    learning_rate: float = Field(0.01, gt=0.0)
    lr_schedule: Literal["constant", "cosine", "exponential"] = "constant"
    lr_decay: float = Field(0.9, gt=0.0, le=1.0)
    lr_final_fraction: float = Field(0.1, ge=0.0, le=1.0)
    epochs: int = Field(10, ge=1)
    batch_size: int = Field(10_000, ge=1)
    block_rows: int = Field(1_000, ge=1)
    standardize: bool = True
    damping: float = Field(1.0, gt=0.0, le=1.0)
    seed: int = Field(0, ge=0)
    checkpoint_every: int = Field(50, ge=1)
    keep_checkpoints: int = Field(3, ge=1)

    @model_validator(mode="after")
    def _batch_holds_a_block(self) -> "TrainConfig":
        if self.batch_size < self.block_rows:
            raise ValueError(f"batch_size ({self.batch_size}) must be at least block_rows "
                             f"({self.block_rows})")
        return self

    def for_rows(self, n_rows: int) -> "TrainConfig":
        """The same config with blocks and batches no larger than a split of ``n_rows`` rows."""
        block = min(self.block_rows, n_rows)
        return self.model_copy(update={"block_rows": block,
                                       "batch_size": min(self.batch_size, block * math.ceil(n_rows / block))})

    def trajectory(self) -> "TrainConfig":
        """This config with the fields that never change the optimiser's updates at their defaults
        (a cache key: equal trajectories share one compiled update)."""
        return self.model_copy(update={name: type(self).model_fields[name].default for name in RESUMABLE_FIELDS})

    def incompatibilities(self, other: "TrainConfig") -> list[str]:
        """``field: old → new`` for every field that would change the trajectory of a resumed run."""
        free = RESUMABLE_FIELDS - ({"epochs"} if self.lr_schedule == "cosine" else set())
        return [f"{name}: {getattr(self, name)!r} → {getattr(other, name)!r}"
                for name in type(self).model_fields
                if name not in free and getattr(self, name) != getattr(other, name)]


def load_config(path: Path | None, base: dict[str, Any] | None = None, **overrides: Any) -> TrainConfig:
    """Read a TOML config (else ``base``, e.g. the config of a run being resumed, else the defaults)
    and apply the non-None ``overrides``.

    Raises:
        InputError: unreadable or invalid TOML, unknown keys or values out of range; the message names
            the file and the key.
    """
    values: dict[str, Any] = dict(base or {})
    source = "defaults" if base is None else "the run's config"
    if path is not None:
        source = str(path)
        try:
            values = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise InputError(f"{path}: no such config file") from None
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
            raise InputError(f"{path}: not a readable TOML file ({error})") from None
    values.update({key: value for key, value in overrides.items() if value is not None})
    try:
        return TrainConfig(**values)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']} (found {e['input']!r})"
                             if e["loc"] else e["msg"] for e in error.errors())
        raise InputError(f"{source}: invalid training config: {problems}") from None
