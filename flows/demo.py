"""``pep demo``: fit pep's estimators on bundled datasets and print their metrics beside baselines.

Interim main job of the foundation issue: binary classification (breast cancer) and regression
(diabetes), both bundled with scikit-learn, standardised, fixed 80/20 split (seed 0).
"""

from __future__ import annotations

import json
import time

import numpy as np
import typer
from rich.console import Console
from rich.table import Table


def _split(x, y):
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=0)
    scaler = StandardScaler().fit(x_train)
    return scaler.transform(x_train), scaler.transform(x_test), y_train, y_test


def _classification() -> list[dict]:
    from sklearn.datasets import load_breast_cancer
    from sklearn.linear_model import LogisticRegression

    from pipeline import SparseGPClassifier

    x_train, x_test, y_train, y_test = _split(*load_breast_cancer(return_X_y=True))
    rows = []
    for name, model in [
        ("pep SparseGPClassifier (M=50, α=0.5)", SparseGPClassifier(num_inducing=50, alpha=0.5)),
        ("logistic regression", LogisticRegression(max_iter=1000)),
    ]:
        start = time.perf_counter()
        model.fit(x_train, y_train)
        proba = np.clip(model.predict_proba(x_test)[np.arange(len(y_test)), y_test], 1e-300, 1.0)
        rows.append({
            "task": "breast_cancer", "model": name, "test_error": float(np.mean(model.predict(x_test) != y_test)),
            "test_nll": float(-np.mean(np.log(proba))), "seconds": time.perf_counter() - start,
        })
    return rows


def _regression() -> list[dict]:
    from sklearn.datasets import load_diabetes
    from sklearn.linear_model import Ridge

    from pipeline import SparseGPRegressor

    x_train, x_test, y_train, y_test = _split(*load_diabetes(return_X_y=True))
    mu, sd = y_train.mean(), y_train.std()
    rows = []
    gp = SparseGPRegressor(num_inducing=30, alpha=0.5)
    ridge = Ridge()
    for name, model in [("pep SparseGPRegressor (M=30, α=0.5)", gp), ("ridge regression", ridge)]:
        start = time.perf_counter()
        model.fit(x_train, (y_train - mu) / sd)
        mean = model.predict(x_test) * sd + mu
        row = {"task": "diabetes", "model": name, "rmse": float(np.sqrt(np.mean((mean - y_test) ** 2)))}
        if model is gp:
            _, std = gp.predict(x_test, return_std=True)
            std = std * sd
            row["test_nll"] = float(np.mean(0.5 * np.log(2 * np.pi * std**2) + 0.5 * ((y_test - mean) / std) ** 2))
        row["seconds"] = time.perf_counter() - start
        rows.append(row)
    return rows


def demo_command(
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
) -> None:
    """Fit pep's sparse GP estimators on bundled datasets and compare them with linear baselines."""
    results = {"classification": _classification(), "regression": _regression()}
    if json_output:
        typer.echo(json.dumps(results))
        return
    console = Console()
    for title, rows, cols in [
        ("Breast cancer (binary, 455 train / 114 test)", results["classification"], ["test_error", "test_nll", "seconds"]),
        ("Diabetes (regression, 353 train / 89 test)", results["regression"], ["rmse", "test_nll", "seconds"]),
    ]:
        table = Table(title=title)
        table.add_column("model")
        for col in cols:
            table.add_column(col, justify="right")
        for row in rows:
            table.add_row(row["model"], *(f"{row[c]:.4g}" if c in row else "—" for c in cols))
        console.print(table)
