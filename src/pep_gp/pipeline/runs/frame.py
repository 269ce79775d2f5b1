"""A run's frame: what its parameters mean, fixed when it starts and kept in every checkpoint.

A fresh run takes its frame from its training data: the model's settings as the config gives them, with
what they leave to the data decided (:func:`~pep_gp.pipeline.models.protocol.chosen_settings`) and the
inducing points capped by the rows (:func:`capped_settings`), the spec's binding (class frequencies), its
target scaling and the store's input statistics. A run continued on a grown store
(:mod:`pep_gp.pipeline.runs.growth`) and an estimator's ``partial_fit`` after its first keep the frame they
were given (a :class:`~pep_gp.pipeline.runs.manifest.RunManifest` or a
:class:`~pep_gp.pipeline.runs.growth.Frame`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..data.blocks import TargetScaling
from ..models import ModelSettings, ModelSpec, chosen_settings, model_settings
from .config import TrainConfig
from .growth import check_growable


@dataclass(frozen=True)
class RunFrame:
    """The frame a run trains in: its settings (as decided), binding and target scaling, the input statistics
    to standardise with (``x_mean``, ``x_std``; None: the store's own) and the notes saying what was decided."""

    settings: ModelSettings
    binding: dict[str, Any]
    targets: TargetScaling
    statistics: dict[str, Any] | None = None
    notes: tuple[str, ...] = ()

    def manifest_fields(self, spec: ModelSpec, store: Any, config: TrainConfig, source: Any,
                        transforms: dict[str, Any]) -> dict[str, Any]:
        """The fields of the run's manifest (:class:`~pep_gp.pipeline.runs.manifest.RunManifest`) that its job
        and this frame fix: the model as trained, the data, the config, the inputs' statistics of ``source``
        (the blocks it trains on) and how a table's rows become its features (``transforms``)."""
        return {"model": spec.name, "model_binding": self.binding, "model_settings": self.settings.model_dump(mode="json"),
                "parameterisation": spec.parameterisation, "data": store.path, "dataset_checksum": store.checksum,
                "config": config, "x_mean": source.x_mean, "x_std": source.x_std,
                "targets": {"shift": self.targets.shift, "scale": self.targets.scale}, "transforms": transforms}


def run_frame(spec: ModelSpec, store: Any, config: TrainConfig, block_rows: int, kept: Any = None) -> RunFrame:
    """The frame of a run of ``spec`` on ``store`` with ``config`` (blocks of ``block_rows`` rows): ``kept``'s
    (its ``model_settings``, ``model_binding``, ``targets``, ``x_mean`` and ``x_std``) when given, else one
    decided from the training split.

    Raises:
        InputError: the model does not fit the data, its settings are invalid, or a kept frame is continued
            with a config that cannot continue it (:func:`~pep_gp.pipeline.runs.growth.check_growable`).
    """
    if kept is not None:
        check_growable(config)
        settings = model_settings(spec, kept.model_settings or config.model, "the run's checkpoint")
        spec.check(store, settings, block_rows)
        return RunFrame(settings, kept.model_binding, TargetScaling(kept.targets.shift, kept.targets.scale),
                        {"x_mean": kept.x_mean, "x_std": kept.x_std})
    n_rows = store.n_rows("train")
    given = model_settings(spec, config.model, "config")
    spec.check(store, given, block_rows)
    binding = spec.binding(store)
    chosen, decided = chosen_settings(spec, given, binding, n_rows)
    settings, capped = capped_settings(chosen, n_rows)
    return RunFrame(settings, binding, spec.targets(store, settings), notes=(*decided, *capped))


def capped_settings(settings: Any, n_rows: int) -> tuple[Any, tuple[str, ...]]:
    """``settings`` with the inducing points capped by the ``n_rows`` training rows they are placed on, and
    a note saying so (none when nothing changed).

    Capped, the inducing inputs are the training inputs and stay there (``train_inducing = False``): the
    sparse model is then the exact GP's (Bui, Yan & Turner 2017, §3), and moving them only lets the
    hyper-parameters overfit (Bauer, van der Wilk & Rasmussen 2016): ``SparseGPRegressor()`` on 10–80 rows
    put 34–80 % of held-out points in its 90 % intervals with them trained, 65–87 % with them fixed
    (scikit-learn's exact GP: 75–93 %; tests/pipeline/test_estimators.py). The settings' ``at_the_rows`` are
    imposed there too (the sparse GPs': ``alpha = 0``, :class:`~pep_gp.pipeline.models.sparse_gp.SparseGPSettings`)."""
    if settings.num_inducing <= n_rows or getattr(settings, "inducing_points", None) is not None:
        return settings, ()  # given inducing inputs are never capped: more than the rows are refused
    imposed = {name: value for name, value in settings.at_the_rows.items() if getattr(settings, name) != value}
    note = (f"num_inducing = {settings.num_inducing} capped at the {n_rows} training rows"
            + (", which are the inducing inputs, kept fixed" if settings.train_inducing else "")
            + "".join(f"; {name} = {value:g} there (was {getattr(settings, name):g})" for name, value in imposed.items()))
    return settings.model_copy(update={"num_inducing": n_rows, "train_inducing": False, **imposed}), (note,)
