"""The model registry: the models ``pep train --model NAME`` and the estimators can build.

A model is registered with :func:`register` (the built-in ones when :mod:`pep_gp.pipeline.models` is
imported), or by an installed package through the ``pep_gp.models`` entry-point group, whose entries
name a :class:`~pep_gp.pipeline.models.protocol.ModelSpec` object::

    [project.entry-points."pep_gp.models"]
    my-model = "my_package.spec:SPEC"
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any

from pydantic import ValidationError

from ..errors import InputError, brief, did_you_mean
from .protocol import ModelSettings, ModelSpec

ENTRY_POINTS = "pep_gp.models"

MODELS: dict[str, ModelSpec] = {}
"""The registered models by name."""


def register(spec: ModelSpec) -> ModelSpec:
    """Add ``spec`` to :data:`MODELS` (replacing a model of the same name) and return it.

    Raises:
        TypeError: ``spec`` lacks part of the :class:`~pep_gp.pipeline.models.protocol.ModelSpec` protocol.
    """
    missing = [name for name in ("name", "task", "description", "Settings", "has_sites", "check", "binding",
                                 "build", "init", "frozen", "targets", "predictive", "parameterisation") if not hasattr(spec, name)]
    if missing:
        raise TypeError(f"{spec!r} is not a ModelSpec: it has no {', '.join(missing)}")
    if not (isinstance(spec.Settings, type) and issubclass(spec.Settings, ModelSettings)):
        raise TypeError(f"{spec.name}: Settings must subclass pep_gp.pipeline.models.ModelSettings")
    MODELS[spec.name] = spec
    return spec


def get_model(name: str) -> ModelSpec:
    """The model registered as ``name`` (looking in the ``pep_gp.models`` entry points if needed).

    Raises:
        InputError: no such model; the message lists the known names.
    """
    if name not in MODELS:
        for entry in entry_points(group=ENTRY_POINTS, name=name):
            register(entry.load())
    try:
        return MODELS[name]
    except KeyError:
        raise InputError(f"--model: unknown model {name!r}; expected one of {', '.join(MODELS)}"
                         f"{did_you_mean(name, MODELS)}") from None


def model_settings(spec: ModelSpec, values: dict[str, Any], source: str = "config") -> ModelSettings:
    """``values`` (the ``[model]`` table of a config) validated as ``spec``'s settings.

    Raises:
        InputError: unknown keys or bad values, named as ``model.KEY`` with ``source``.
    """
    try:
        return spec.Settings(**values)
    except ValidationError as error:
        problems = "; ".join(f"model.{'.'.join(map(str, e['loc']))}: {e['msg']} (found {brief(e['input'])})"
                             + (did_you_mean(str(e["loc"][0]), spec.Settings.model_fields)
                                if e["type"] == "extra_forbidden" else "")
                             for e in error.errors())
        raise InputError(f"{source}: invalid settings of --model {spec.name}: {problems}") from None
