"""Models: the protocol a model implements, the registry, and the built-in models' spec modules.

To add a model (see the README's "Adding a model"): write its mathematics as a :mod:`pep_gp.core` module
implementing :class:`Energy` (and :class:`SiteUpdates` for EP-style factor updates), write a spec
(:class:`ModelSpec`: settings, data checks, initialisation, held-out metrics) and :func:`register` it.
"""

from .protocol import Energy, ModelSettings, ModelSpec, SiteSettings, SiteUpdates
from .registry import MODELS, get_model, model_settings, register
from . import multiclass, sparse_gp, deep_gp, tied_ep  # noqa: E402,F401  (register the built-in models)

__all__ = ["Energy", "MODELS", "ModelSettings", "ModelSpec", "SiteSettings", "SiteUpdates", "get_model", "model_settings",
           "register"]
