"""The collapsed multi-output regression objective (:mod:`pep_gp.core.models.multi_output_regression`: independent
outputs sharing the inducing inputs, or the linear model of coregionalisation) as a model of the trainer.

As :mod:`pep_gp.pipeline.models.collapsed`, its sites are integrated out in closed form, so it trains with the
whole training split as one block (full batch) and predicts from its training rows. Its blocks' ``y`` is
``[R, P]`` (a store of ``P`` targets, ``pep ingest --target a --target b``, or ``[R]`` for one), each column
standardised by its own mean and deviation; the numbers of outputs and of training rows are the data's (the
binding). The rows travel with the params, :class:`WithRows` ``(params, x, y)`` (the standardised inputs and the
targets in model units, frozen: the energy reads the block's rows, never these), so a run holds all its
predictive needs: ``pep predict``, ``pep evaluate`` and :func:`pep_gp.load` read them from the checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

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
from .likelihood_parameters import LikelihoodParameterSettings
from .protocol import InducingSettings, KernelSetting, SpecBase, check_one_block, settings_kernel, settings_mean
from .registry import register
from .collapsed import COLLAPSED_NOISE_VARIANCE
from .sparse_gp import check_given_inducing, check_inducing


class MultiOutputSettings(LikelihoodParameterSettings, InducingSettings):
    """The settings of the multi-output models (unknown keys and out-of-range values refused; ``fixed`` and
    ``prior`` name ``noise_variance``, every output's Gaussian noise: kept at its start to the bit, or a prior on
    each output's)."""

    outputs: Literal["independent", "lmc"] = Field("independent", description="independent outputs sharing the "
                                                   "inducing inputs, or the linear model of coregionalisation")
    latents: int | None = Field(None, ge=1, description="the LMC's latent GPs Q (None: one per output)")
    shared_kernel: bool = Field(False, description="independent outputs: one kernel for every output (GPflow's "
                                "SharedIndependent) instead of one each (SeparateIndependent)")
    kernel: KernelSetting = Field(None, description="each latent GP's kernel (default a squared exponential with "
                                  "one lengthscale per input; the LMC's variance held at 1)")
    alpha: float = Field(0.5, ge=0.0, le=1.0, description="0: the VFE bound, 1: FITC")
    noise_variance: float = Field(COLLAPSED_NOISE_VARIANCE, gt=0.0, description="every output's starting noise "
                                  "variance, in standardised target units, the collapsed regressor's (fixed/prior "
                                  "name it noise_variance)")
    jitter: float = Field(DEFAULT_JITTER, ge=0.0, description="relative jitter on each K_uu")

    takes_priors = True  # a kernel's prior= over every latent GP's values, and the noises', join the objective (MAP)
    takes_mean = True  # one mean_function= per output (each its own parameters), in the bound and the predictive

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


class WithRows(NamedTuple):
    """The params of the multi-output model in the trainer and in a run: its :class:`MultiOutputParams` and the
    training rows its predictions condition on, ``x`` ``[N, D]`` standardised, ``y`` ``[N, P]`` in model units."""

    params: MultiOutputParams
    x: Any
    y: Any


@dataclass(frozen=True)
class MultiOutputOfRows(MultiOutputRegression):
    """:class:`~pep_gp.core.models.multi_output_regression.MultiOutputRegression` of the trainer, with its numbers
    of outputs and of training rows (the data's, from the binding): its energy takes :class:`WithRows` and the
    block's rows (a block's targets ``[R]`` of one output as ``[R, 1]``), never the rows among the params."""

    n_outputs: int = 1
    n_rows: int = 0

    def step_shared(self, params: WithRows, n_total):
        return super().step_shared(params.params, n_total)

    def global_energy(self, params: WithRows, shared, n_total):
        return super().global_energy(params.params, shared, n_total)

    def data_energy(self, params: WithRows, shared, x, y, mask):
        return super().data_energy(params.params, shared, x, y.reshape(x.shape[0], -1), mask)


jax.tree_util.register_static(MultiOutputOfRows)


@dataclass(frozen=True)
class MultiOutputPredictive:
    """The predictive of ``params = (params, x_train, y_train)`` at standardised rows in the targets' units
    (``shift``, ``scale``: ``P`` numbers each): ``{"mean", "var"}`` ``[B, P]`` or, with ``output_cov``, ``{"mean", "cov"}``
    with ``cov`` ``[B, P, P]`` across the outputs; ``latent``: of ``f`` (else of ``y``, noise included).
    Its outputs have a column per target (``per_target``: ``pep predict``'s ``mean_<target>``)."""

    model: MultiOutputRegression
    shift: Any
    scale: Any
    output_cov: bool = False
    latent: bool = False

    per_target = True

    @classmethod
    def of(cls, model: MultiOutputRegression, shift: Any, scale: Any, output_cov: bool = False,
           latent: bool = False) -> "MultiOutputPredictive":
        """The predictive with ``shift`` and ``scale`` (a number or ``P``) as tuples of floats: ``pep predict``'s
        (:meth:`MultiOutputSpec.predictive`) and the estimator's are then one program, the same bits (the
        estimator's with arrays of them was another, whose means were one ulp apart on an AVX-512 machine)."""
        return cls(model, *(tuple(map(float, np.atleast_1d(value))) for value in (shift, scale)), output_cov, latent)

    def __call__(self, params, x) -> dict:
        params, x_train, y_train = params
        moments = self.model.predict_f if self.latent else self.model.predict_y
        mean, spread = moments(params, x_train, y_train, x, self.output_cov)
        shift, scale = jnp.asarray(self.shift), jnp.asarray(self.scale)
        spread = spread * (jnp.outer(scale, scale) if self.output_cov else scale**2)
        return {"mean": mean * scale + shift, "cov" if self.output_cov else "var": spread}


jax.tree_util.register_dataclass(MultiOutputPredictive, data_fields=["shift", "scale"],
                                 meta_fields=["model", "output_cov", "latent"])


@dataclass(frozen=True)
class MultiOutputSpec(SpecBase):
    """The spec of :class:`MultiOutputOfRows` (module docstring)."""

    Settings = MultiOutputSettings
    parameterisation = "3"  # a kernel pytree (pep_gp.core.kernels)

    def check(self, data: Any, settings: MultiOutputSettings, block_rows: int) -> None:
        if data.task != "regression":
            raise InputError(f"{data.path}: --model {self.name} needs a regression store; this store holds a "
                             f"{data.task} task")
        check_one_block(self, data, block_rows)
        check_given_inducing(data, settings)

    def binding(self, data: Any) -> dict[str, Any]:
        return {"n_outputs": int(getattr(data, "n_targets", 1)), "n_rows": int(data.n_rows("train"))}

    def build(self, settings: MultiOutputSettings, binding: dict) -> MultiOutputOfRows:
        return MultiOutputOfRows(settings.outputs, settings.alpha, settings.jitter, settings.leaf_priors(),
                                 binding["n_outputs"], binding["n_rows"])

    def targets(self, data: Any, settings: MultiOutputSettings | None = None) -> TargetScaling:
        """Each target column standardised by its training mean and deviation (one number each for one)."""
        mean, std = data.attrs["y_mean"], data.attrs["y_std"]
        if isinstance(mean, list):
            return TargetScaling(tuple(map(float, mean)), tuple(map(float, std)))
        return TargetScaling(float(mean), float(std))

    def init(self, model: MultiOutputOfRows, x, settings: MultiOutputSettings, seed: int) -> WithRows:
        """k-means inducing inputs (or ``inducing_points``), each latent GP's kernel with the median distance for
        a lengthscale left unset (the LMC's default variance held at 1: the scale is ``W``'s), the settings'
        noise for every output, the settings' mean function for each output (its own parameters,
        :meth:`~pep_gp.core.means.MeanFunction.stacked`), and rows of zeros of the binding's shapes; the rows and
        the LMC's ``W`` are set from the training rows by :meth:`settle`."""
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
        try:
            mean = settings_mean(settings).stacked(model.n_outputs, x.shape[1])
        except ValueError as error:
            raise InputError(f"model.mean_function: {error}") from None
        noise = unconstrained(MultiOutputParams, noise_variance=np.full(model.n_outputs, settings.noise_variance, float))
        mixing = None
        if lmc:  # the columns beyond P: small draws of seed; the first min(Q, P) are the targets' (settle)
            latents = settings.n_latents(model.n_outputs)
            mixing = np.zeros((model.n_outputs, latents))
            beyond = latents - min(latents, model.n_outputs)
            mixing[:, latents - beyond:] = 0.1 * np.random.default_rng(seed).normal(size=(model.n_outputs, beyond))
            mixing = jnp.asarray(mixing)
        return WithRows(MultiOutputParams(kernel, **noise, inducing=jnp.asarray(z), mixing=mixing, mean=mean),
                        jnp.zeros((model.n_rows, x.shape[1])), jnp.zeros((model.n_rows, model.n_outputs)))

    def settle(self, model: MultiOutputOfRows, params: WithRows, x, y, settings: MultiOutputSettings,
               n_total) -> WithRows:
        """The training rows ``x``, ``y`` (every row: the trainer's one block) kept among the params; the LMC's
        first ``min(Q, P)`` columns of ``W`` from the standardised targets' correlation: its top eigenvectors
        times the roots of their eigenvalues (at least 0.01)."""
        y = np.asarray(y).reshape(np.shape(y)[0], -1)
        rows = params._replace(x=jnp.asarray(x), y=jnp.asarray(y))
        if settings.outputs != "lmc":
            return rows
        values, vectors = np.linalg.eigh(y.T @ y / y.shape[0])  # ascending
        mixing = np.array(params.params.mixing)
        top = min(mixing.shape[1], y.shape[1])
        mixing[:, :top] = vectors[:, ::-1][:, :top] * np.sqrt(np.maximum(values[::-1][:top], 1e-2))
        return rows._replace(params=params.params._replace(mixing=jnp.asarray(mixing)))

    def frozen(self, settings: MultiOutputSettings, params: WithRows) -> WithRows:
        """As every model's (:meth:`SpecBase.frozen`), and the training rows."""
        return super().frozen(settings, params)._replace(x=True, y=True)

    def predictive(self, model: MultiOutputOfRows, targets: TargetScaling) -> MultiOutputPredictive:
        """Each output's predictive of ``y`` ``[B, P]`` from the rows among the params (:class:`WithRows`)."""
        return MultiOutputPredictive.of(model, targets.shift, targets.scale)


MULTI_OUTPUT = register(MultiOutputSpec("multi-output-regressor", "regression",
                               "collapsed Power-EP multi-output regression: independent outputs or the LMC "
                               "(full batch)"))
