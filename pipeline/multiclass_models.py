"""Registry entries of the multi-class GP classifiers of seed001 (``multiclass-sep``, ``multiclass-direct``).

Both train :class:`~pepcore.models.multiclass.MultiClassGP` (C latent sparse GPs, one tied factor per
class, O(C·M²) state) through the distributed engine:

* ``multiclass-sep`` — the paper's SEP training (seed001 §2.3, spec §2.8–2.9): per step the workers
  return the summed site statistics of the minibatch, the coordinator applies the damped tied-factor
  update (spec §2.8.5), then the workers return the data term and its gradient at the *refined* factor
  with the cavity held fixed (eq. 10/12), and the coordinator takes an Adam step on the hyper-parameters
  and inducing inputs only (the factor is frozen for Adam; :class:`~pepcore.models.multiclass.NaturalFactor`).
* ``multiclass-direct`` — the direct mode: the factor is a
  :class:`~pepcore.models.multiclass.CholeskyFactor` and Adam ascends the exact gradient of the same
  energy ``G + L`` w.r.t. everything (no site statistics).

Untied EP (``MultiClassGPClassifier(method="ep")``) keeps O(N·C·M) per-row state that the block
functions cannot address (a block does not know its row indices), so it is not a distributed model; it
trains in-process through the estimator for N up to ~10⁴.

The per-class factor counts ``n_c`` (spec §2.8) need the class frequencies of the training split: a
spec is bound to them with :meth:`MultiClassSpec.bind` (from the store's ``class_counts`` attribute, or
from a checkpoint's manifest).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from pepcore.models.multiclass import MultiClassGP, MultiClassParams, NaturalFactor, SiteStats
from pipeline.blocks import TargetScaling
from pipeline.config import TrainConfig
from pipeline.errors import InputError
from pipeline.metrics import classification_sums
from pipeline.stores import Store

DEFAULT_ALPHA = 1.0  # the paper's EP/SEP (issue 5 item 5: α → 0 is the variational limit)


def _labels(y):
    """Block targets arrive as float64 (pipeline.blocks); the model indexes classes with integers."""
    return y.astype(jnp.int32)


@dataclass(frozen=True)
class LabelledMultiClass:
    """The energy contract (DESIGN §2) of a :class:`MultiClassGP` on engine blocks (float labels)."""

    gp: MultiClassGP

    def step_shared(self, params: MultiClassParams, n_total):
        return self.gp.step_shared(params, n_total)

    def global_energy_shared(self, params: MultiClassParams, shared, n_total):
        return self.gp.global_energy_shared(params, shared, n_total)

    def local_energy_shared(self, params: MultiClassParams, shared, x, y, mask, n_total):
        return self.gp.local_energy_shared(params, shared, x, _labels(y), mask)

    def global_energy(self, params: MultiClassParams, n_total):
        return self.gp.global_energy(params, n_total)

    def local_energy(self, params: MultiClassParams, x, y, mask, n_total):
        return self.gp.local_energy(params, x, _labels(y), mask, n_total)

    def predict(self, params: MultiClassParams, x):
        return self.gp.predict(params, x)


@dataclass(frozen=True)
class LabelledSEP(LabelledMultiClass):
    """:class:`LabelledMultiClass` with the EP-style site statistics and tied-factor update of SEP."""

    def local_site_stats(self, params: MultiClassParams, shared, x, y, mask, n_total) -> SiteStats:
        return self.gp.local_site_stats(params, shared, x, _labels(y), mask)

    def refresh_shared(self, params: MultiClassParams, shared, n_total):
        return self.gp.refresh_shared(params, shared, n_total)

    def site_update(self, params: MultiClassParams, stats: SiteStats, scale, damping):
        return self.gp.site_update(params, stats, scale, damping)


@dataclass(frozen=True)
class MultiClassHeldOut:
    """Per-block held-out sums: ``log p(y|x)`` by the predictive quadrature of eq. (11), and errors."""

    model: LabelledMultiClass

    def __call__(self, params, x, y, mask):
        log_probs = self.model.predict(params, x)
        labels = _labels(y)
        log_true = jnp.take_along_axis(log_probs, labels[:, None], axis=1)[:, 0]
        return classification_sums(log_true, jnp.argmax(log_probs, axis=1) == labels, mask)


@dataclass(frozen=True)
class MultiClassSpec:
    """The :class:`pipeline.models.ModelSpec` protocol for the multi-class GP (see the module docstring).

    Attributes:
        name: the ``--model`` name.
        description: one line for ``--help`` and reports.
        factor: ``"natural"`` (SEP, EP updates) or ``"cholesky"`` (direct mode, Adam on everything).
        class_counts: training rows per class, set by :meth:`bind`.
    """

    name: str
    description: str
    factor: str
    class_counts: tuple[int, ...] = ()
    task: str = "classification"

    def check(self, store: Store) -> None:
        """Raise InputError unless ``store`` is a classification store with every class in training."""
        if store.task != "classification":
            raise InputError(f"{store.path}: --model {self.name} needs a classification store; this store "
                             f"holds a {store.task} task")
        counts = store.attrs.get("class_counts") or {}
        if "train" not in counts:
            raise InputError(f"{store.path}: has no class_counts attribute (re-ingest it with `pep ingest`)")
        missing = [c for c, n in enumerate(counts["train"]) if n == 0]
        if missing:
            raise InputError(f"{store.path}: classes {missing} have no training rows; --model {self.name} "
                             "needs every class of 0..C-1 in the training split")

    def store_binding(self, store: Store) -> dict[str, Any]:
        """What :meth:`bind` needs from ``store`` (JSON, kept in checkpoint manifests)."""
        return {"class_counts": [int(n) for n in store.attrs["class_counts"]["train"]]}

    def bind(self, binding: dict[str, Any]) -> "MultiClassSpec":
        """This spec with the class counts of a training split."""
        return replace(self, class_counts=tuple(int(n) for n in binding["class_counts"]))

    def targets(self, store: Store) -> TargetScaling:
        return TargetScaling()

    def _gp(self, config: TrainConfig) -> MultiClassGP:
        if not self.class_counts:
            raise ValueError(f"{self.name}: bind the spec to a store's class counts first")
        alpha = DEFAULT_ALPHA if config.alpha is None else config.alpha
        if alpha <= 0.0:
            raise InputError(f"alpha: --model {self.name} needs a power in (0, 1]; found {alpha}")
        counts = np.asarray(self.class_counts, dtype=float)
        return MultiClassGP(tuple(float(f) for f in counts / counts.sum()), alpha=alpha, jitter=config.jitter)

    def model(self, config: TrainConfig) -> LabelledMultiClass:
        """The static model object (with site statistics for SEP)."""
        wrapper = LabelledSEP if self.factor == "natural" else LabelledMultiClass
        return wrapper(self._gp(config))

    def init(self, model: LabelledMultiClass, x: np.ndarray, config: TrainConfig) -> MultiClassParams:
        """Inducing inputs: a random sample of ``M`` rows per class; lengthscales from the median
        distance; amplitude and noise 1 (spec §4.0)."""
        if config.num_inducing > x.shape[0]:
            raise InputError(f"num_inducing = {config.num_inducing} exceeds the {x.shape[0]} training "
                             "rows available to place inducing inputs")
        return model.gp.init(x, config.num_inducing, factor=self.factor, seed=config.seed)

    def held_out(self, model: LabelledMultiClass, targets: TargetScaling) -> Callable:
        return MultiClassHeldOut(model)

    def frozen(self, config: TrainConfig) -> Callable[[MultiClassParams], MultiClassParams]:
        """SEP: the factor moves only by EP updates; both modes: inducing inputs unless ``train_inducing``."""
        def frozen(params: MultiClassParams) -> MultiClassParams:
            fixed = jax.tree_util.tree_map(lambda _: False, params)
            fixed = fixed._replace(inducing=not config.train_inducing)
            if isinstance(params.factor, NaturalFactor):
                fixed = fixed._replace(factor=NaturalFactor(True, True))
            return fixed

        return frozen


SPECS = (
    MultiClassSpec("multiclass-sep", "multi-class GP classification, stochastic EP with tied factors per "
                   "class (seed001 §2.3)", "natural"),
    MultiClassSpec("multiclass-direct", "multi-class GP classification, Adam on the tied-factor energy for "
                   "all parameters (direct mode)", "cholesky"),
)
