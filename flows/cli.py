"""The ``pep`` command line: each sub-command lives in the module of its flow and is registered here.

A command's module is imported only when that command runs (``pep ingest`` must not pay for JAX, which
the training modules load); ``pep --help`` and :data:`app` register them all.
"""

from __future__ import annotations

import sys
from importlib import import_module

import typer

COMMANDS = {
    "ingest": ("pep_gp.flows.ingest", "ingest_command"),
    "train": ("pep_gp.flows.train", "train_command"),
    "evaluate": ("pep_gp.flows.evaluate", "evaluate_command"),
    "demo": ("pep_gp.flows.demo", "demo_command"),
    "cluster": ("pep_gp.flows.cluster", "cluster_app"),  # a group: `pep cluster certs DIR`
}


def build_app(names=tuple(COMMANDS)) -> typer.Typer:
    """A Typer application with the named sub-commands (always in group mode: ``pep NAME …``)."""
    application = typer.Typer(
        name="pep",
        help="Train Expectation-Propagation-family sparse Gaussian process models at scale.",
        no_args_is_help=True,
        add_completion=False,
    )
    application.callback()(lambda: None)
    for name in names:
        module, attribute = COMMANDS[name]
        command = getattr(import_module(module), attribute)
        if isinstance(command, typer.Typer):
            application.add_typer(command, name=name)
        else:
            application.command(name)(command)
    return application


def __getattr__(name: str):
    if name == "app":  # the full application, for tests and embedding
        return build_app()
    raise AttributeError(f"module 'pep_gp.flows.cli' has no attribute {name!r}")


def main() -> None:
    """Console-script entry point."""
    requested = sys.argv[1] if len(sys.argv) > 1 else None
    build_app((requested,) if requested in COMMANDS else tuple(COMMANDS))()
