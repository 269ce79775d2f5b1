"""The training configuration: a validated pydantic model, loadable from TOML; the same defaults serve
``pep train`` and the estimators.

The top level holds what every model shares (optimiser, stopping, minibatches, checkpoints); the
``[model]`` table holds the model's own settings, validated by the model's settings class
(:mod:`pep_gp.pipeline.models`; e.g. ``num_inducing``, ``alpha``). Optax Adam with its default moments (as
Villacampa-Calvo & Hernández-Lobato 2017 use); α as the model's paper. pep's own defaults, chosen so that a
run on a few thousand rows converges in a couple of minutes and a large store keeps the workers busy:
``batch_size`` = 10,000 rows per step (spread over the workers in blocks of ``block_rows``),
``learning_rate`` = 0.05, M = 50 inducing points (100 for deep GPs; the papers' large-data runs use 200, set
it in ``[model]``), and training until the stopping rule says converged or 2,000 steps. A model may set its
own defaults for fields a config leaves out (``ModelSpec.train_defaults``, in the model table of README.md): the deep
GPs take 1,000 Adam steps at 0.01 without early stopping, as Bui et al. (2016) train for a fixed number of
steps (docs/results/deep-gp.md).

Example ``train.toml``::

    epochs = 5
    batch_size = 5000
    learning_rate = 0.02

    [model]
    num_inducing = 100
    alpha = 0.5
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from ..data.sizes import bucket
from ..errors import InputError, did_you_mean
from ..optimizers import optimizer_description

# Fields that do not change the optimisation trajectory: they may differ when a run is resumed
# (``epochs`` only without the cosine schedule, whose decay is spread over all the steps).
RESUMABLE_FIELDS = frozenset({"epochs", "max_steps", "tol", "checkpoint_every", "keep_checkpoints",
                              "max_rejected_in_a_row"})
DEFAULT_BLOCK_ROWS = 1_000
DEFAULT_MAX_STEPS = 2_000


class TrainConfig(BaseModel):
    """Everything that determines a training run besides the model name and the data.

    Attributes:
        model: the model's own settings (the ``[model]`` table), validated by the model.
        optimizer: the optax optimiser, by name (``"adam"``, the default) or as a table with its ``name`` and
            settings (``{name = "sgd", momentum = 0.9}``; :mod:`pep_gp.pipeline.optimizers`).
        learning_rate: the optimiser's initial step size.
        lr_schedule: ``constant``; ``cosine`` (decays to ``lr_final_fraction`` of it at the last
            step); ``exponential`` (multiplied by ``lr_decay`` every epoch).
        lr_decay, lr_final_fraction: parameters of the schedules above.
        epochs: passes over the training split, all run (the stopping rule only reports whether the run
            converged); None (the default): train until the stopping rule says converged or
            ``max_steps``, whichever comes first.
        max_steps: the most steps (None: :data:`DEFAULT_MAX_STEPS` without ``epochs``, no cap with them).
        tol: the stopping rule's tolerance in nats per training row per window of steps
            (:mod:`pep_gp.pipeline.training.stopping`); 0 never stops early.
        batch_size: training rows per step (rounded up to whole blocks); larger than the split means
            full-batch steps.
        block_rows: rows per block, the engine's unit of work (static shape, compiled once); unset:
            ``min(1000, batch_size)``, so blocks follow a small batch (a batch of every row is cut into as
            many equal blocks, each padded to a bucket size: :meth:`for_rows`).
        standardize: standardise the inputs with the training split's per-feature mean and standard
            deviation (docs/how-to/own-data.md); False feeds the stored values as they are (Villacampa-Calvo & Hernández-Lobato's (2017) MNIST driver only
            divides the pixels by 255, which `pep ingest` already does; per-pixel standardisation would
            blow up the near-constant border pixels).
        seed: seed of the initialisation and of the minibatch order (below 2**32).
        checkpoint_every: steps between checkpoints (one is always written at the end).
        keep_checkpoints: complete checkpoints kept (older ones are pruned).
        max_rejected_in_a_row: training stops with an error once this many steps in a row were
            rejected as non-finite (the parameters stay where the last accepted step left them, so a
            longer streak is a run idling to its end, typically at too large a learning rate).
        parallel_over: how a step is spread over the workers: ``rows`` (every model: each worker computes
            some blocks of the minibatch) or ``classes`` (multi-class SEP only: each worker holds some classes'
            parameters, tied factors and Adam moments and computes their per-class work, which does not shrink
            with the rows; :mod:`pep_gp.pipeline.training.class_groups`). The two agree to rounding, not to
            the bit, so a run resumes with its own.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: dict[str, Any] = Field(default_factory=dict)
    optimizer: Annotated[str | dict[str, Any], BeforeValidator(optimizer_description)] = "adam"
    learning_rate: float = Field(0.05, gt=0.0)
    lr_schedule: Literal["constant", "cosine", "exponential"] = "constant"
    lr_decay: float = Field(0.9, gt=0.0, le=1.0)
    lr_final_fraction: float = Field(0.1, ge=0.0, le=1.0)
    epochs: int | None = Field(None, ge=1)
    max_steps: int | None = Field(None, ge=0)
    tol: float = Field(1e-4, ge=0.0)
    batch_size: int = Field(10_000, ge=1)
    block_rows: int | None = Field(None, ge=1)
    standardize: bool = True
    seed: int = Field(0, ge=0, le=2**32 - 1)
    checkpoint_every: int = Field(50, ge=1)
    keep_checkpoints: int = Field(3, ge=1)
    max_rejected_in_a_row: int = Field(10, ge=1)
    parallel_over: Literal["rows", "classes"] = "rows"

    @model_validator(mode="after")
    def _batch_holds_a_block(self) -> "TrainConfig":
        if self.block_rows is not None and self.batch_size < self.block_rows:
            raise ValueError(f"batch_size ({self.batch_size}) is smaller than block_rows ({self.block_rows}); "
                             "lower block_rows or leave it unset (blocks then follow the batch)")
        return self

    def with_defaults(self, defaults: Mapping[str, Any]) -> "TrainConfig":
        """This config with ``defaults`` (a model's own, :attr:`~pep_gp.pipeline.models.ModelSpec.train_defaults`)
        in place of pep's for every field it was not given; a model's ``max_steps`` is its cap without
        ``epochs``, as :data:`DEFAULT_MAX_STEPS` is pep's (given ``epochs`` run uncapped)."""
        given = self.model_dump(include=self.model_fields_set)
        chosen = {name: value for name, value in defaults.items()
                  if not (name == "max_steps" and self.epochs is not None)}
        return type(self)(**{**chosen, **given})

    def total_steps(self, steps_per_epoch: int) -> int:
        """The steps the run may take: ``epochs`` passes, capped by ``max_steps`` (see the attributes)."""
        cap = self.max_steps if self.max_steps is not None else (None if self.epochs else DEFAULT_MAX_STEPS)
        steps = self.epochs * steps_per_epoch if self.epochs else cap
        return steps if cap is None else min(steps, cap)

    @property
    def stops_early(self) -> bool:
        """True when the stopping rule ends the run (no ``epochs`` asked for and ``tol > 0``)."""
        return self.epochs is None and self.tol > 0

    @property
    def rows_per_block(self) -> int:
        """``block_rows``, or ``min(1000, batch_size)`` when unset."""
        return self.block_rows if self.block_rows is not None else min(DEFAULT_BLOCK_ROWS, self.batch_size)

    def for_rows(self, n_rows: int) -> "TrainConfig":
        """The same config with blocks and batches no larger than a split of ``n_rows`` rows (a smaller split
        is one block padded to a bucket size, :mod:`pep_gp.pipeline.data.sizes`). A batch of every row with
        ``block_rows`` unset is cut into as few blocks as before, of equal shares padded to a bucket size: 1,437
        rows take two blocks of 768, not of 1,000 (a multi-class step on digits 34 ms against 42, issue 63)."""
        block = min(self.rows_per_block, bucket(n_rows))
        if self.block_rows is None and self.batch_size >= n_rows:
            block = min(block, bucket(math.ceil(n_rows / math.ceil(n_rows / block))))
        return self.model_copy(update={"block_rows": block,
                                       "batch_size": min(self.batch_size, block * math.ceil(n_rows / block))})

    def in_one_block(self, n_rows: int) -> "TrainConfig":
        """The same config with every row of a split of ``n_rows`` rows in one block and one batch, padded to a
        bucket size: for objectives that are not a sum over blocks (the collapsed bound)."""
        rows = bucket(n_rows)
        return self.model_copy(update={"batch_size": rows, "block_rows": rows})

    def trajectory(self) -> "TrainConfig":
        """This config with the fields that never change the compiled step's updates at their defaults (a cache
        key: equal trajectories share one compiled step). The seed is among them: it draws the initial values
        and orders the minibatches, outside the step, so fits that differ only in their seed compile once."""
        return self.model_copy(update={name: type(self).model_fields[name].get_default(call_default_factory=True)
                                       for name in RESUMABLE_FIELDS | {"seed"}})

    def incompatibilities(self, other: "TrainConfig") -> list[str]:
        """``field: old → new`` for every field that would change the trajectory of a resumed run
        (model settings as ``model.KEY``)."""
        free = RESUMABLE_FIELDS - ({"epochs", "max_steps"} if self.lr_schedule == "cosine" else set())
        mine, theirs = self._flat(), other._flat()
        return [f"{name}: {mine.get(name)!r} → {theirs.get(name)!r}" for name in sorted(set(mine) | set(theirs))
                if name not in free and mine.get(name) != theirs.get(name)]

    def _flat(self) -> dict[str, Any]:
        values = self.model_dump()
        return {**{k: v for k, v in values.items() if k != "model"},
                **{f"model.{k}": v for k, v in values["model"].items()}}


def parse_settings(assignments: list[str]) -> dict[str, Any]:
    """``["model.alpha=0.5", "lr_schedule=cosine"]`` as nested config values: each value is read as a TOML
    value (``0.5``, ``true``, ``[2, 2]``, ``"text"``) or else taken as a string.

    Raises:
        InputError: an assignment without ``=`` or with an empty key, named as ``--set``.
    """
    values: dict[str, Any] = {}
    for assignment in assignments:
        key, equals, text = assignment.partition("=")
        parts = key.strip().split(".")
        if not equals or not all(parts):
            raise InputError(f"--set {assignment!r}: expected KEY=VALUE, e.g. model.alpha=0.5 or epochs=5")
        try:
            value = tomllib.loads(f"value = {text.strip()}")["value"]
        except tomllib.TOMLDecodeError:
            value = text.strip()
        target = values
        for part in parts[:-1]:
            target = target.setdefault(part, {})
            if not isinstance(target, dict):
                raise InputError(f"--set {assignment!r}: {part} is not a table of settings")
        target[parts[-1]] = value
    return values


def load_config(path: Path | None, base: dict[str, Any] | None = None, settings: dict[str, Any] | None = None,
                **overrides: Any) -> TrainConfig:
    """Read a TOML config (else ``base``, e.g. the config of a run being resumed, else the defaults), apply
    ``settings`` (nested values, e.g. from :func:`parse_settings`) and the non-None ``overrides``.

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
    for key, value in (settings or {}).items():
        merge = isinstance(value, dict) and isinstance(values.get(key, {}), dict)
        values[key] = {**values.get(key, {}), **value} if merge else value
    values.update({key: value for key, value in overrides.items() if value is not None})
    try:
        return TrainConfig(**values)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']} (found {e['input']!r})"
                             + (f"{did_you_mean(str(e['loc'][0]), TrainConfig.model_fields)} (a model's settings go "
                                "in the [model] table)" if e["type"] == "extra_forbidden" else "")
                             if e["loc"] else e["msg"] for e in error.errors())
        raise InputError(f"{source}: invalid training config: {problems}") from None
