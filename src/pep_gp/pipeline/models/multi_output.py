"""The collapsed multi-output regression objective (:mod:`pep_gp.core.models.multi_output_regression`: independent
outputs sharing the inducing inputs, or the linear model of coregionalisation) as a model of the trainer.

As :mod:`pep_gp.pipeline.models.collapsed`, its sites are integrated out in closed form, so it trains with the
whole training split as one block (full batch) and predicts from its training rows. Its blocks' ``y`` is
``[R, P]`` (a store of ``P`` targets, ``pep ingest --target a --target b``, or ``[R]`` for one), each column
standardised by its own mean and deviation; the number of outputs is the data's (the binding).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from pydantic import Field, model_validator

from ...core.initialisation import initial_kernel_and_inducing
from ...core.kernels import SquaredExponential
from ...core.linalg import DEFAULT_JITTER
from ...core.models.multi_output_regression import MultiOutputParams, MultiOutputRegression
from ...core.parameters import unconstrained
from ..data.blocks import TargetScaling
from ..errors import InputError
from .protocol import InducingSettings, KernelSetting, SpecBase, settings_kernel
from .sparse_gp import INITIAL_NOISE_VARIANCE, check_given_inducing, check_inducing


class MultiOutputSettings(InducingSettings):
    """The settings of the multi-output models (unknown keys and out-of-range values refused)."""

    outputs: Literal["independent", "lmc"] = Field("independent", description="independent outputs sharing the "
                                                   "inducing inputs, or the linear model of coregionalisation")
    latents: int | None = Field(None, ge=1, description="the LMC's latent GPs Q (None: one per output)")
    shared_kernel: bool = Field(False, description="independent outputs: one kernel for every output (GPflow's "
                                "SharedIndependent) instead of one each (SeparateIndependent)")
    kernel: KernelSetting = Field(None, description="each latent GP's kernel (default a squared exponential with "
                                  "one lengthscale per input; the LMC's variance held at 1)")
    alpha: float = Field(0.5, ge=0.0, le=1.0, description="0: the VFE bound, 1: FITC")
    noise_variance: float = Field(INITIAL_NOISE_VARIANCE, gt=0.0, description="every output's starting noise "
                                  "variance, in standardised target units")
    jitter: float = Field(DEFAULT_JITTER, ge=0.0, description="relative jitter on each K_uu")

    takes_priors = True  # a kernel's prior= is added to the objective over every latent GP's values (a MAP fit)

    @model_validator(mode="after")
    def _of_the_chosen_outputs(self) -> "MultiOutputSettings":
        if self.latents is not None and self.outputs != "lmc":
            raise ValueError("latents is the LMC's number of latent GPs: set outputs='lmc' with it")
        if self.shared_kernel and self.outputs != "independent":
            raise ValueError("shared_kernel applies to outputs='independent' (the LMC's latent GPs each have "
                             "their own kernel)")
        return self

    def n_latents(self, n_outputs: int) -> int:
        """The latent GPs (kernels) of ``n_outputs`` outputs: the LMC's ``Q``, one shared, or one per output."""
        if self.outputs == "lmc":
            return self.latents or n_outputs
        return 1 if self.shared_kernel else n_outputs


@dataclass(frozen=True)
class MultiOutputOfRows(MultiOutputRegression):
    """:class:`~pep_gp.core.models.multi_output_regression.MultiOutputRegression` with its number of outputs
    (the data's, from the binding), taking a block's targets ``[R]`` of one output as ``[R, 1]``."""

    n_outputs: int = 1

    def data_energy(self, params: MultiOutputParams, shared, x, y, mask):
        return super().data_energy(params, shared, x, y.reshape(x.shape[0], -1), mask)


jax.tree_util.register_static(MultiOutputOfRows)


@dataclass(frozen=True)
class MultiOutputSpec(SpecBase):
    """The spec of :class:`MultiOutputOfRows` (module docstring)."""

    Settings = MultiOutputSettings
    parameterisation = "3"  # a kernel pytree (pep_gp.core.kernels)

    def check(self, data: Any, settings: MultiOutputSettings, block_rows: int) -> None:
        if data.task != "regression":
            raise InputError(f"{data.path}: --model {self.name} needs a regression store; this store holds a "
                             f"{data.task} task")
        if block_rows < data.n_rows("train"):
            raise InputError(f"{data.path}: --model {self.name} needs the whole training split in one block; "
                             f"block_rows is {block_rows} for {data.n_rows('train')} rows")
        check_given_inducing(data, settings)

    def binding(self, data: Any) -> dict[str, Any]:
        return {"n_outputs": int(getattr(data, "n_targets", 1))}

    def build(self, settings: MultiOutputSettings, binding: dict) -> MultiOutputOfRows:
        return MultiOutputOfRows(settings.outputs, settings.alpha, settings.jitter, binding["n_outputs"])

    def targets(self, data: Any, settings: MultiOutputSettings | None = None) -> TargetScaling:
        """Each target column standardised by its training mean and deviation (one number each for one)."""
        mean, std = data.attrs["y_mean"], data.attrs["y_std"]
        if isinstance(mean, list):
            return TargetScaling(tuple(map(float, mean)), tuple(map(float, std)))
        return TargetScaling(float(mean), float(std))

    def init(self, model: MultiOutputOfRows, x, settings: MultiOutputSettings, seed: int) -> MultiOutputParams:
        """k-means inducing inputs (or ``inducing_points``), each latent GP's kernel with the median distance for
        a lengthscale left unset (the LMC's default variance held at 1: the scale is ``W``'s), the settings'
        noise for every output; the LMC's ``W`` is set from the targets by :meth:`settle`."""
        if settings.inducing_points is None:
            check_inducing(settings, x.shape[0])
        lengthscales, _, z = initial_kernel_and_inducing(x, settings.num_inducing, inducing=settings.inducing_points,
                                                         seed=seed)
        lmc = settings.outputs == "lmc"
        kernel = settings_kernel(settings) or SquaredExponential(variance=1.0, fixed=("variance",) if lmc else ())
        try:
            kernel = kernel.bank(settings.n_latents(model.n_outputs), x.shape[1], lengthscales)
        except ValueError as error:
            raise InputError(f"model.kernel: {error}") from None
        noise = unconstrained(MultiOutputParams, noise_variance=jnp.full(model.n_outputs, settings.noise_variance))
        mixing = None
        if lmc:  # the columns beyond P: small draws of seed; the first min(Q, P) are the targets' (settle)
            latents = settings.n_latents(model.n_outputs)
            mixing = np.zeros((model.n_outputs, latents))
            beyond = latents - min(latents, model.n_outputs)
            mixing[:, latents - beyond:] = 0.1 * np.random.default_rng(seed).normal(size=(model.n_outputs, beyond))
            mixing = jnp.asarray(mixing)
        return MultiOutputParams(kernel, **noise, inducing=jnp.asarray(z), mixing=mixing)

    def settle(self, model: MultiOutputOfRows, params: MultiOutputParams, x, y, settings: MultiOutputSettings,
               n_total) -> MultiOutputParams:
        """The LMC's first ``min(Q, P)`` columns of ``W`` from the standardised targets' correlation: its top
        eigenvectors times the roots of their eigenvalues (at least 0.01); independent outputs as they are."""
        if settings.outputs != "lmc":
            return params
        y = np.asarray(y).reshape(np.shape(y)[0], -1)
        values, vectors = np.linalg.eigh(y.T @ y / y.shape[0])  # ascending
        top = min(params.mixing.shape[1], y.shape[1])
        mixing = np.array(params.mixing)
        mixing[:, :top] = vectors[:, ::-1][:, :top] * np.sqrt(np.maximum(values[::-1][:top], 1e-2))
        return params._replace(mixing=jnp.asarray(mixing))

    def predictive(self, model: MultiOutputOfRows, targets: TargetScaling) -> None:
        """None: predictions need the training rows (module docstring)."""
        return None


MULTI_OUTPUT = MultiOutputSpec("multi-output-regressor", "regression",
                               "collapsed Power-EP multi-output regression: independent outputs or the LMC "
                               "(full batch)")
