"""Models: the protocol a model implements, the registry, and the built-in models' spec modules.

To add a model (see docs/how-to/adding-a-model.md): write its mathematics as a :mod:`pep_gp.core` module
implementing :class:`Energy` (and :class:`SiteUpdates` for EP-style factor updates), write a spec
(a :class:`SpecBase` subclass: settings, ``build`` and ``init``, and the parts it changes) and
:func:`register` it.
"""

from .predictive import HeldOut
from .protocol import Energy, ModelSettings, ModelSpec, SiteSettings, SiteUpdates, SpecBase, chosen_settings
from .registry import MODELS, get_model, model_settings, register
from . import multiclass, sparse_gp, ordinal, heteroscedastic, deep_gp, tied_ep, multi_output  # noqa: E402,F401  (register the built-in models)

__all__ = ["Energy", "HeldOut", "MODELS", "ModelSettings", "ModelSpec", "SiteSettings", "SiteUpdates", "SpecBase",
           "get_model", "model_settings", "register"]
