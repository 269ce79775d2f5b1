"""The ``pep`` command line: each sub-command lives in the module of its flow and is registered here."""

from __future__ import annotations

import typer

from flows.demo import demo_command
from flows.evaluate import evaluate_command
from flows.ingest import ingest_command
from flows.train import train_command

app = typer.Typer(
    name="pep",
    help="Train Expectation-Propagation-family sparse Gaussian process models at scale.",
    no_args_is_help=True,
    add_completion=False,
)
app.command("ingest")(ingest_command)
app.command("train")(train_command)
app.command("evaluate")(evaluate_command)
app.command("demo")(demo_command)


def main() -> None:
    """Console-script entry point."""
    app()
