"""The estimator of every registered model: a few lines naming its spec (the constructor arguments are the
spec's settings and the fit fields, :data:`~pep_gp.pipeline.estimators.base.FIT_FIELDS`).

Example:
    >>> import numpy as np
    >>> from pep_gp import SparseGPRegressor
    >>> x = np.linspace(0, 5, 40)[:, None]; y = np.sin(x[:, 0])
    >>> model = SparseGPRegressor(num_inducing=10).fit(x, y)
    >>> float(np.abs(model.predict(x) - y).max()) < 0.2
    True
"""

from __future__ import annotations

import numpy as np
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from ..models import deep_gp, heteroscedastic, multiclass, ordinal, sparse_gp, tied_ep
from ..runs.config import TrainConfig
from ..training.full_batch import FULL_BATCH_ROWS
from .base import ESTIMATORS, GPEstimator
from .fitted import GPClassifierMixin, GPRegressorMixin
from .multi_output import MultiOutputGPRegressor


class SparseGPRegressor(GPRegressorMixin, RegressorMixin, GPEstimator):
    """Sparse GP regression with a tied Power-EP factor (Bui, Yan & Turner 2017): α = 1 is EP (FITC-like),
    α → 0 the variational (VFE) limit. ``pep train --model sparse-gp-regressor``."""

    spec = sparse_gp.REGRESSOR

    def _full_batch_config(self, config: TrainConfig, n_rows: int) -> TrainConfig:
        """With the Gaussian likelihood every training row in one block (as ``CollapsedGPRegressor``'s), so that the
        full-batch fit maximises the collapsed bound, which is not a sum over blocks, up to
        :data:`~pep_gp.pipeline.training.full_batch.FULL_BATCH_ROWS` rows
        (:mod:`pep_gp.pipeline.training.full_batch`)."""
        if self.likelihood != "gaussian" or n_rows > FULL_BATCH_ROWS:
            return config
        return config.in_one_block(n_rows)


class HeteroscedasticGPRegressor(GPRegressorMixin, RegressorMixin, GPEstimator):
    """Heteroscedastic regression: a sparse GP for the mean and one for the log noise variance,
    ``y ~ N(f(x), σ₀² e^{g(x)})`` (Lázaro-Gredilla & Titsias 2011), tied Power-EP factors.
    ``predict(X, return_std=True)`` gives each row's predictive deviation, its own noise included;
    :meth:`predict_noise_std` the noise alone. ``pep train --model sparse-gp-heteroscedastic``."""

    spec = heteroscedastic.HETEROSCEDASTIC

    def predict_noise_std(self, X) -> np.ndarray:
        """The noise's standard deviation at the rows of ``X`` (targets' units): ``√E[σ₀² e^{g(x)}]`` under the
        posterior of ``g``, ``predict``'s variance less ``predict_f``'s."""
        _, std = self.predict(X, return_std=True)
        return np.sqrt(np.maximum(std**2 - self.predict_f(X)[1], 0.0))


class SparseGPClassifier(GPClassifierMixin, ClassifierMixin, GPEstimator):
    """Binary GP classification (probit) with a tied Power-EP factor (Bui, Yan & Turner 2017).
    Labels may be any two values; ``classes_`` holds them sorted. ``pep train --model sparse-gp-classifier``."""

    spec = sparse_gp.CLASSIFIER


class OrdinalGPClassifier(GPClassifierMixin, ClassifierMixin, GPEstimator):
    """Ordinal regression: ordered labels of one latent sparse GP through the ordinal probit with learned cut
    points (Chu & Ghahramani 2005), tied Power-EP factor. The labels' sorted order (``classes_``: numbers, or
    codes of the categories in their order) is the ordinal scale; ``predict_proba`` gives every class's
    probability and ``predict`` the most probable class, as scikit-learn's classifiers do.
    ``pep train --model sparse-gp-ordinal``."""

    spec = ordinal.ORDINAL

    @property
    def cut_points_(self) -> np.ndarray:
        """The learned cut points ``b_1 < … < b_{C−1}`` on the latent scale of ``predict_f``."""
        check_is_fitted(self)
        return np.asarray(self.model_.likelihood.cut_points(self.params_.likelihood))

    def sample_y(self, X, n_samples: int = 1, seed: int = 0) -> np.ndarray:
        """Draws of the labels at the rows of ``X``, values of ``classes_``: from each joint draw of
        :meth:`sample_f`, the class of ``f + ε`` (``ε ~ N(0, 1)``) among the cut points. The same ``seed``
        gives the same draws; limits as :meth:`sample_f`.

        Returns:
            ``[n_samples, n]``.
        """
        rng = np.random.default_rng(seed)
        f = self._draw_f(X, n_samples, rng)
        return self.classes_[self.model_.likelihood.sample_labels(f, rng, self.params_.likelihood)]


class MultiClassGPClassifier(GPClassifierMixin, ClassifierMixin, GPEstimator):
    """Multi-class GP classification with stochastic EP and one tied factor per class (Villacampa-Calvo &
    Hernández-Lobato 2017). ``pep train --model multiclass-sep``."""

    spec = multiclass.SEP
    _full_batch = False  # its site sweeps do not settle at the default damping (docs/how-to/training.md)


class DirectMultiClassGPClassifier(GPClassifierMixin, ClassifierMixin, GPEstimator):
    """The multi-class GP classifier with its tied factors trained by Adam on the same energy (no EP
    updates), the direct energy optimisation of Bui et al. (2016, §4.2, trained by Adam, §8).
    ``pep train --model multiclass-direct``."""

    spec = multiclass.DIRECT
    _full_batch = False  # by L-BFGS it ended behind Adam in test NLL on the everyday tables (docs/how-to/training.md)


class TiedEPClassifier(GPClassifierMixin, ClassifierMixin, GPEstimator):
    """Binary probit GP classification whose tied factor moves by stochastic EP (``projection="kl"``) or
    stochastic Quantile Propagation (``"wasserstein"``, Zhang et al. 2020). ``pep train --model
    tied-ep-classifier``."""

    spec = tied_ep.TIED_EP


class DeepGPRegressor(GPRegressorMixin, RegressorMixin, GPEstimator):
    """Deep GP regression trained with approximate EP (Bui et al. 2016): hidden layers of GPs
    (``hidden_dims``; ``()`` is one GP layer), Gaussian output. ``pep train --model deep-gp``.

    At its defaults the output's mean is a line in the inputs past the hidden layers, started at the least-squares fit
    of the training rows (``input_mean_function="linear"``; ``f = wᵀx + b + g(h)``): on diabetes, a table a line
    explains about as well as anything, Bui et al.'s model with the zero mean was 0.05 nats per row behind it over five
    splits, and 0.04 behind ridge regression (docs/results/deep-gp.md). ``input_mean_function=None`` is their model.
    A fit of arrays of at least 200 rows
    (:data:`~pep_gp.pipeline.estimators.base.AUTO_EARLY_STOPPING_ROWS`) holds out a tenth of them and ends at the
    parameters of their best NLL once 100 steps in a row have not improved it (``early_stopping="auto"``,
    ``n_iter_no_change=100``), within Bui et al.'s 1,000 Adam steps at 0.01: run to the end, the α = 1 fit follows
    its training rows on a noisy table and its 90 % intervals cover too little (diabetes: 0.80 of held-out rows;
    0.86 stopped early, docs/results/deep-gp.md).
    ``early_stopping=False`` and ``input_mean_function=None`` train the papers' model and protocol on every row, as
    ``pep train --model deep-gp`` does."""

    spec = deep_gp.REGRESSOR
    _full_batch = False  # its defaults (1,000 Adam steps at 0.01) are the papers' and the benchmarks'
    _own_defaults = {"early_stopping": "auto", "n_iter_no_change": 100, "input_mean_function": "linear"}


class DeepGPClassifier(GPClassifierMixin, ClassifierMixin, GPEstimator):
    """Deep GP binary classification (probit output) trained with approximate EP (Bui et al. 2016).
    ``pep train --model deep-gp-classifier``."""

    spec = deep_gp.CLASSIFIER
    _full_batch = False  # its defaults (1,000 Adam steps at 0.01) are the papers' and the benchmarks'


class MultiClassDeepGPClassifier(GPClassifierMixin, ClassifierMixin, GPEstimator):
    """Deep GP multi-class classification trained with approximate EP (Bui et al. 2016): one output GP per
    class with the multi-class factors of Villacampa-Calvo & Hernández-Lobato (2017). ``pep train --model
    deep-gp-multiclass``."""

    spec = deep_gp.MULTICLASS
    _full_batch = False  # its defaults (1,000 Adam steps at 0.01) are the papers' and the benchmarks'


def built_in() -> dict[str, type[GPEstimator]]:
    """The estimators of pep's own models, by ``--model`` name: :data:`ESTIMATORS` of this module and of
    ``MultiOutputGPRegressor``'s, without those of plugin or test models, and without ``CollapsedGPRegressor``
    (not a ``pep train`` model)."""
    own = {__name__, MultiOutputGPRegressor.__module__}
    return {name: cls for name, cls in sorted(ESTIMATORS.items()) if cls.__module__ in own}


def model_table() -> str:
    """Every registered model with its estimator, as a markdown table (the docs' model reference)."""
    rows = [f"| `{name}` | `{cls.__name__}` | {cls.spec.task} | {'site updates' if cls.spec.has_sites else 'gradient'} "
            f"| {cls.spec.description} | {own_defaults(cls.spec)} |" for name, cls in built_in().items()]
    return "\n".join(["| `--model` | estimator | task | tied factor moves by | what it is | training defaults of its own |",
                      "|---|---|---|---|---|---|", *rows])


def own_defaults(spec) -> str:
    """The config fields a spec sets for itself (``train_defaults``) as ``name = value``, or a dash."""
    return ", ".join(f"`{name} = {value:g}`" for name, value in spec.train_defaults.items()) or "–"
