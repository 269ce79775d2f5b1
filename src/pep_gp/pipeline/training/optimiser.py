"""The optimiser of a training job: the optax optimiser its config names (Adam by default,
:mod:`pep_gp.pipeline.optimizers`) over the trainable leaves, its learning-rate schedule, and the job's compiled
step (:func:`compiled_step`), cached so that equal jobs compile once."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any

import jax
import optax

from ..engine import Backend
from ..models import ModelSpec
from ..optimizers import build_optimizer
from ..models.protocol import uses_site_updates
from ..runs.config import TrainConfig
from .class_groups import ClassParallelStep
from .class_parallel import ClassParallelTraining, check_parallel_over
from .step import TrainStep, training_step


def adam(learning_rate: optax.ScalarOrSchedule, frozen: Callable[[Any], Any] | None = None) -> optax.GradientTransformation:
    """optax Adam (default moments, as the papers use) that leaves the leaves ``frozen(params)`` marks
    True where they are."""
    return keeping(optax.adam(learning_rate), frozen)


def keeping(base: optax.GradientTransformation, frozen: Callable[[Any], Any] | None) -> optax.GradientTransformation:
    """``base`` on the leaves ``frozen(params)`` marks False; a zero update (their bits kept) on the others."""
    if frozen is None:
        return base
    labels = lambda params: jax.tree_util.tree_map(lambda f: "frozen" if f else "train", frozen(params))
    return optax.multi_transform({"train": base, "frozen": optax.set_to_zero()}, labels)


def learning_rate(config: TrainConfig, steps_per_epoch: int, total_steps: int) -> optax.Schedule:
    """The configured schedule: constant, cosine decay over all steps, or exponential per epoch."""
    if config.lr_schedule == "cosine":
        return optax.cosine_decay_schedule(config.learning_rate, total_steps, alpha=config.lr_final_fraction)
    if config.lr_schedule == "exponential":
        return optax.exponential_decay(config.learning_rate, steps_per_epoch, config.lr_decay, staircase=True)
    return optax.constant_schedule(config.learning_rate)


@lru_cache(maxsize=8)
def compiled_step(spec: ModelSpec, settings: Any, model: Any, trajectory: str, steps_per_epoch: int,
                  total_steps: int) -> TrainStep:
    """The compiled step of a job, cached on hashable arguments (``trajectory`` is the config's JSON
    without the fields that leave the updates unchanged), so equal jobs (segments, retries, repeated
    estimator fits, folds of a cross-validation) compile once."""
    config = TrainConfig.model_validate_json(trajectory)
    return training_step(model, **step_arguments(spec, settings, config, steps_per_epoch, total_steps))


@lru_cache(maxsize=8)
def class_parallel_step(spec: ModelSpec, settings: Any, model: Any, trajectory: str, steps_per_epoch: int,
                        total_steps: int) -> ClassParallelStep:
    """:func:`compiled_step`'s class-parallel counterpart (``parallel_over = "classes"``, multi-class SEP): the
    same optimiser and damping, cached alike (its per-class programs are cached on them)."""
    config = TrainConfig.model_validate_json(trajectory)
    arguments = step_arguments(spec, settings, config, steps_per_epoch, total_steps)
    return ClassParallelStep(model, arguments["optimizer"], arguments["damping"])


def step_of(parallel_over: str, backend: Backend, spec: ModelSpec, settings: Any, model: Any, trajectory: str,
            steps_per_epoch: int, total_steps: int) -> TrainStep:
    """The step a trainer runs: :func:`compiled_step`, or for ``parallel_over = "classes"`` the class-parallel
    step with its groups placed by ``backend`` (:class:`~pep_gp.pipeline.training.class_parallel.ClassParallelTraining`,
    a new one each call: it holds the groups).

    Raises:
        InputError: ``parallel_over = "classes"`` with a model whose classes cannot be spread.
    """
    check_parallel_over(parallel_over, spec, settings)
    job = (spec, settings, model, trajectory, steps_per_epoch, total_steps)
    if parallel_over != "classes":
        return compiled_step(*job)
    return ClassParallelTraining(class_parallel_step(*job), compiled_step(*job), backend)


def step_arguments(spec: ModelSpec, settings: Any, config: TrainConfig, steps_per_epoch: int,
                   total_steps: int) -> dict[str, Any]:
    """The keyword arguments of :func:`~pep_gp.pipeline.training.step.training_step` for a job: its
    optimiser and, for a model with site updates, ``sites`` and the damping schedule (also those of the
    class-parallel step, :class:`~pep_gp.pipeline.training.class_groups.ClassParallelStep`)."""
    optimizer = keeping(build_optimizer(config.optimizer, learning_rate(config, steps_per_epoch, total_steps)),
                        lambda params: spec.frozen(settings, params))
    if not uses_site_updates(spec, settings):
        return {"optimizer": optimizer}
    return {"optimizer": optimizer, "sites": True, "damping": settings.damping_schedule(steps_per_epoch)}
