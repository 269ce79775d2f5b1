"""The optimiser a training config names (``optimizer``, issue 65 item 8): an optax optimiser by name, with its
own settings, at the config's learning rate (or schedule).

``optimizer = "adam"`` (the default: optax's Adam with its default moments, as the papers train) or a table
with a ``name`` and the optimiser's keyword arguments, e.g. ``{name = "sgd", momentum = 0.9}`` or
``{name = "adamw", weight_decay = 1e-3}``; ``learning_rate`` stays the config's own field. A name not in
:data:`OPTIMIZERS` or a keyword the optimiser does not take is refused in one line listing the choices.

Example:
    >>> optimizer_description({"name": "sgd", "momentum": 0.9})
    {'name': 'sgd', 'momentum': 0.9}
    >>> optimizer_description("adamw")
    'adamw'
"""

from __future__ import annotations

import inspect
from typing import Any

import optax

OPTIMIZERS: dict[str, Any] = {
    "adam": optax.adam, "adamw": optax.adamw, "adamax": optax.adamax, "amsgrad": optax.amsgrad,
    "nadam": optax.nadam, "radam": optax.radam, "adabelief": optax.adabelief, "yogi": optax.yogi,
    "lamb": optax.lamb, "lion": optax.lion, "adagrad": optax.adagrad, "rmsprop": optax.rmsprop, "sgd": optax.sgd,
}
"""The optimisers ``optimizer`` may name: optax's, by their optax names."""


def _keywords(name: str) -> list[str]:
    """The keyword arguments of optimiser ``name`` besides ``learning_rate``."""
    return [p for p in inspect.signature(OPTIMIZERS[name]).parameters if p != "learning_rate"]


def optimizer_description(value: Any) -> str | dict[str, Any]:
    """``value`` checked as an ``optimizer`` setting: a name, or a table with a ``name`` and keyword arguments
    of numbers, booleans or text (ValueError, one line, naming an unknown optimiser or keyword and the
    choices)."""
    settings = {"name": value} if isinstance(value, str) else value
    if not isinstance(settings, dict) or not isinstance(settings.get("name"), str):
        raise ValueError(f"an optimiser's name ({', '.join(OPTIMIZERS)}) or a table with a 'name' and its "
                         f"settings; got {value!r}")
    name = settings["name"]
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimiser {name!r}; expected one of {', '.join(OPTIMIZERS)}")
    unknown = sorted(set(settings) - {"name", *_keywords(name)})
    if unknown:
        detail = ("learning_rate is the config's own field" if unknown == ["learning_rate"]
                  else f"it takes {', '.join(_keywords(name))}")
        raise ValueError(f"optimiser {name!r}: unknown settings {unknown}; {detail}")
    for key, item in settings.items():
        if not isinstance(item, (int, float, bool, str)):
            raise ValueError(f"optimiser {name!r}: {key} must be a number, a boolean or text; got {item!r}")
    return value if isinstance(value, str) else dict(settings)


def build_optimizer(description: str | dict[str, Any], learning_rate: optax.ScalarOrSchedule) -> optax.GradientTransformation:
    """The optax optimiser of a checked ``optimizer`` setting at ``learning_rate``: for ``"adam"``
    ``optax.adam(learning_rate)``, the same transformation (and bits) as before optimisers were named."""
    settings = {"name": description} if isinstance(description, str) else dict(description)
    return OPTIMIZERS[settings.pop("name")](learning_rate, **settings)
