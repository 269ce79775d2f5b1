"""The ``pep`` command line: each sub-command lives in the module of its flow and is registered here.

A command's module is imported only when that command runs (``pep ingest`` must not pay for JAX, which
the training modules load), and ``pep --help`` and ``pep --version`` import none of them: the list of
commands shows the one-line summaries of :data:`COMMANDS` (a test checks them against the commands'
docstrings), so both answer in well under a second.
"""

from __future__ import annotations

import sys
from importlib import import_module
from typing import Annotated

import typer

from ..pipeline.errors import did_you_mean

COMMANDS = {  # name: (module, attribute, summary)
    "ingest": ("pep_gp.flows.ingest", "ingest_command", "Ingest a data source into a chunked Zarr store for training, or append its rows to one."),
    "train": ("pep_gp.flows.train", "train_command",
              "Train a model on a store, with checkpoints; resumable with --resume."),
    "evaluate": ("pep_gp.flows.evaluate", "evaluate_command",
                 "Held-out metrics and calibration of a trained run's newest checkpoint."),
    "predict": ("pep_gp.flows.predict", "predict_command",
                "Predict the rows of a table with a trained run (labels and probabilities, or mean, std, intervals)."),
    "demo": ("pep_gp.flows.demo", "demo_command",
             "Ingest the bundled airline data, train on a local 2-worker cluster, compare with baselines."),
    "cluster": ("pep_gp.flows.cluster", "cluster_app", "Tools for running pep on a Dask cluster."),  # a group
}
HELP = "Train Expectation-Propagation-family sparse Gaussian process models at scale."


def _print_version(value: bool) -> None:
    if value:
        from pep_gp import __version__

        typer.echo(f"pep {__version__}")
        raise typer.Exit()


def _root(version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                                 help="Print pep's version and exit.")] = False) -> None:
    """The options before a command (``pep --version``)."""


def build_app(names=tuple(COMMANDS), summaries_only: bool = False) -> typer.Typer:
    """A Typer application with the named sub-commands (always in group mode: ``pep NAME …``); with
    ``summaries_only``, placeholders that only list the commands (nothing is imported)."""
    application = typer.Typer(name="pep", help=HELP, no_args_is_help=True, add_completion=False)
    application.callback()(_root)
    for name in names:
        module, attribute, summary = COMMANDS[name]
        if summaries_only:
            application.command(name, help=summary)(lambda: None)
            continue
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
    if requested in COMMANDS:
        build_app((requested,))()
    elif requested is not None and not requested.startswith("-"):
        typer.echo(f"pep: error: unknown command {requested!r}; expected one of {', '.join(COMMANDS)}"
                   f"{did_you_mean(requested, COMMANDS)}", err=True)
        raise SystemExit(2)
    else:
        build_app(summaries_only=True)()
