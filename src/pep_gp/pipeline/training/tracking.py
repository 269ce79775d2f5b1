"""Experiment tracking: :class:`MLflowLogger` and :class:`TensorBoardLogger`, training callbacks
(:mod:`pep_gp.pipeline.training.callbacks`) for the estimators' ``callbacks=`` and ``pep train --log-to``.

Each logs, under the same names:

* the run's parameters once, at its start: ``model``, ``model_settings.*`` and ``config.*`` (a run
  manifest's model settings and training config, nested keys joined by dots);
* ``energy``, the energy estimate of every step, at that step;
* ``epoch/*``, every number of each evaluation's record (``epoch/energy_per_row``, ``epoch/test_nll``, …) at
  the step that ended the epoch;
* ``final/*``, every number of the final metrics at the last step (``final/log_marginal_likelihood`` of an
  estimator, ``final/test_nll`` of ``pep train``; a true/false verdict as 1/0).

MLflow and TensorBoard are optional: install them with ``pip install "pep-gp[tracking]"`` (``mlflow-skinny``,
the tracking client without MLflow's server, and ``tensorboardX``'s event-file writer, with ``tensorboard`` to
view the files). They are imported when a logger is made, never by ``import pep_gp``.
"""

from __future__ import annotations

import importlib
import json
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import InputError
from .callbacks import Callback

EXTRA = 'pip install "pep-gp[tracking]"'
LOG_TO_HELP = ("Log the run's settings, every step's energy, each epoch's metrics and the final metrics to "
               "mlflow (`mlflow` for MLflow's default tracking URI, or `mlflow:URI`, e.g. mlflow:sqlite:///mlflow.db) "
               "or to TensorBoard event files (`tensorboard:DIR`); repeatable or comma-separated. Needs "
               f"{EXTRA}.")
MAX_PARAM_CHARS = 500
"""The longest parameter value logged (a longer one, e.g. a list of given inducing inputs, is cut with ``…``;
MLflow takes at most 6,000 characters)."""
METRICS_PER_BATCH = 1000
"""MLflow's most metrics per ``log_batch`` request."""


def _module(name: str, logger: str):
    """Import ``name`` for ``logger``, or InputError naming the extra to install."""
    try:
        return importlib.import_module(name)
    except ImportError:
        raise InputError(f"{logger} needs {name.split('.')[0]}, which is not installed: {EXTRA}") from None


def flat_params(info: Mapping[str, Any]) -> dict[str, str]:
    """The run's parameters of a ``start`` event as flat ``name: text`` pairs: ``model``, ``model_settings.*``
    and ``config.*``, nested mappings joined by dots, other values as JSON, cut at :data:`MAX_PARAM_CHARS`."""
    flat: dict[str, str] = {}

    def add(prefix: str, value: Any) -> None:
        if isinstance(value, Mapping):
            for key, inner in value.items():
                add(f"{prefix}.{key}", inner)
            return
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        flat[prefix] = text if len(text) <= MAX_PARAM_CHARS else text[:MAX_PARAM_CHARS - 1] + "…"

    add("model", info["model"])
    add("model_settings", info["model_settings"])
    add("config", info["config"])
    return flat


def numbers(values: Mapping[str, Any] | None, prefix: str, leave_out: tuple[str, ...] = ()) -> dict[str, float]:
    """The finite numbers of ``values`` (true/false as 1/0) under ``prefix/`` names."""
    found = {}
    for key, value in (values or {}).items():
        if key in leave_out or not isinstance(value, (bool, int, float)):
            continue
        if math.isfinite(float(value)):
            found[f"{prefix}/{key}"] = float(value)
    return found


class MetricsLogger(Callback):
    """What both loggers share: the last step seen (where the final metrics go), the parameters logged once
    per run, and the names of :mod:`the module docstring <pep_gp.pipeline.training.tracking>`. A subclass
    writes ``_params``, ``_metrics`` and ``_close``."""

    def __init__(self) -> None:
        self._step = 0

    def on_start(self, info: dict[str, Any]) -> None:
        self._step = int(info["step"])
        self._params(flat_params(info))

    def on_step(self, step: int, energy: float) -> None:
        self._step = step
        if math.isfinite(energy):
            self._metrics({"energy": energy}, step)

    def on_evaluation(self, record: dict[str, Any]) -> None:
        self._metrics(numbers(record, "epoch", leave_out=("epoch", "step")), int(record["step"]))

    def on_end(self, summary: dict[str, Any] | None) -> None:
        if summary is not None:
            self._metrics(numbers(summary, "final"), self._step)
        self._close(failed=summary is None)

    def _params(self, params: dict[str, str]) -> None:
        raise NotImplementedError

    def _metrics(self, values: dict[str, float], step: int) -> None:
        raise NotImplementedError

    def _close(self, failed: bool) -> None:
        raise NotImplementedError


class MLflowLogger(MetricsLogger):
    """Log a fit to an MLflow run (through ``mlflow.tracking.MlflowClient``, never MLflow's global active run):
    created at the fit's start in ``experiment`` (made if missing), ended ``FINISHED`` (``FAILED`` when the fit
    raised). Step metrics are sent in batches, at each evaluation and at the end.

    Args:
        tracking_uri: where runs go, e.g. ``"sqlite:///mlflow.db"`` or ``"http://host:5000"``; None for
            MLflow's default (``MLFLOW_TRACKING_URI``, else MLflow 3's ``sqlite:///mlflow.db`` in the working
            directory). MLflow 3 refuses a ``file:`` directory unless ``MLFLOW_ALLOW_FILE_STORE=true``.
        experiment: the experiment's name.
        run_name: the run's name (None: MLflow's).

    Attributes:
        run_id: the MLflow run's id (None before the fit starts).

    Raises:
        InputError: mlflow is not installed (``pip install "pep-gp[tracking]"``); when the fit starts, a
            tracking URI that MLflow refuses.
    """

    def __init__(self, tracking_uri: str | None = None, experiment: str = "pep", run_name: str | None = None):
        super().__init__()
        _module("mlflow.tracking", "MLflowLogger")  # refused now, not when the fit starts
        self.tracking_uri, self.experiment, self.run_name = tracking_uri, experiment, run_name
        self.run_id: str | None = None
        self._client: Any = None  # only while a fit runs: a fitted estimator holding the logger pickles and clones
        self._pending: list[Any] = []

    def _params(self, params: dict[str, str]) -> None:
        from mlflow.exceptions import MlflowException

        tracking = _module("mlflow.tracking", "MLflowLogger")
        try:
            client = tracking.MlflowClient(self.tracking_uri)
            found = client.get_experiment_by_name(self.experiment)
            experiment = found.experiment_id if found is not None else client.create_experiment(self.experiment)
        except MlflowException as error:  # e.g. MLflow 3 refusing a file: directory
            uri = self.tracking_uri or tracking.get_tracking_uri()
            raise InputError(f"MLflowLogger: tracking URI {uri!r}: {str(error).splitlines()[0]}") from None
        self._client = client
        self.run_id = client.create_run(experiment, run_name=self.run_name).info.run_id
        entries = [_module("mlflow.entities", "MLflowLogger").Param(key, value) for key, value in params.items()]
        for start in range(0, len(entries), 100):  # MLflow's most parameters per request
            self._client.log_batch(self.run_id, params=entries[start:start + 100])

    def _metrics(self, values: dict[str, float], step: int) -> None:
        stamp, metric = int(time.time() * 1000), _module("mlflow.entities", "MLflowLogger").Metric
        self._pending += [metric(key, value, stamp, step) for key, value in values.items()]
        if set(values) != {"energy"} or len(self._pending) >= METRICS_PER_BATCH:  # an evaluation, or a full batch
            self._flush()

    def _flush(self) -> None:
        for start in range(0, len(self._pending), METRICS_PER_BATCH):
            self._client.log_batch(self.run_id, metrics=self._pending[start:start + METRICS_PER_BATCH])
        self._pending = []

    def _close(self, failed: bool) -> None:
        if self._client is None:  # the fit failed before it started
            return
        self._flush()
        self._client.set_terminated(self.run_id, "FAILED" if failed else "FINISHED")
        self._client = None


class TensorBoardLogger(MetricsLogger):
    """Log a fit as TensorBoard event files in ``log_dir`` (``tensorboard --logdir DIR`` shows them), with
    ``tensorboardX``'s writer: the parameters as a text table (``params``), the metrics as scalars.

    Args:
        log_dir: the directory of the event files (made if missing; one file per fit).

    Raises:
        InputError: tensorboardX is not installed (``pip install "pep-gp[tracking]"``).
    """

    def __init__(self, log_dir: str | Path):
        super().__init__()
        _module("tensorboardX", "TensorBoardLogger")  # refused now, not when the fit starts
        self.log_dir = Path(log_dir)
        self._writer: Any = None  # only while a fit runs (as MLflowLogger's client)

    def _params(self, params: dict[str, str]) -> None:
        self._writer = _module("tensorboardX", "TensorBoardLogger").SummaryWriter(str(self.log_dir))
        cells = {key: value.replace("|", "\\|") for key, value in params.items()}  # a | would end the cell
        table = "\n".join(["| parameter | value |", "| --- | --- |", *(f"| {k} | {v} |" for k, v in cells.items())])
        self._writer.add_text("params", table, self._step)

    def _metrics(self, values: dict[str, float], step: int) -> None:
        for key, value in values.items():
            self._writer.add_scalar(key, value, step)

    def _close(self, failed: bool) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def loggers(targets: list[str] | None) -> list[MetricsLogger]:
    """The loggers of ``pep train --log-to`` values (repeated and/or comma-separated): ``mlflow``,
    ``mlflow:URI`` or ``tensorboard:DIR``.

    Raises:
        InputError: another spelling, a tensorboard without a directory, or a package that is not installed.
    """
    made: list[MetricsLogger] = []
    for value in targets or ():
        for target in (part.strip() for part in value.split(",")):
            kind, _, where = target.partition(":")
            if kind == "mlflow":
                made.append(MLflowLogger(where or None))
            elif kind == "tensorboard" and where:
                made.append(TensorBoardLogger(where))
            elif target:
                raise InputError(f"--log-to: expected mlflow, mlflow:URI or tensorboard:DIR, found {target!r}")
    return made
