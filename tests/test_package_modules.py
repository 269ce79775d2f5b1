"""Issue 62, item 9: ``import pep_gp`` did not make ``pep_gp.kernels`` reachable (GPflow's and GPyTorch's
top-level imports do). Now the package's public modules are attributes of ``pep_gp``, imported when first
used, so that ``import pep_gp`` still loads no JAX."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.heavy
def test_pep_gp_kernels_is_reachable_from_import_pep_gp_and_loaded_when_used():
    script = ("import sys, pep_gp\nbefore = 'jax' in sys.modules\nkernel = pep_gp.kernels.Matern52() + pep_gp.kernels.Linear()\n"
              "print(before, type(kernel).__name__, 'kernels' in dir(pep_gp), pep_gp.kernels is sys.modules['pep_gp.kernels'])")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "Sum", "True", "True"]


@pytest.mark.heavy
def test_an_estimator_fit_in_memory_imports_no_dask_zarr_or_prefect():
    """Issue 63: a second process's fit of an everyday table spent a tenth of its time importing what a fit
    from arrays does not use (Dask's engine, Zarr's stores, Prefect's flows); they are imported where used."""
    script = ("import json, sys\nimport pep_gp\nfrom tests.tiny import SETTINGS, data\n"
              "for name, task in [('SparseGPRegressor', 'regression'), ('SparseGPClassifier', 'binary')]:\n"
              "    x, y = data()[task]\n"
              "    assert len(getattr(pep_gp, name)(**SETTINGS[name]).fit(x, y).predict(x)) == len(y)\n"
              "print(json.dumps(sorted(m for m in ('dask', 'distributed', 'zarr', 'prefect', 'typer') if m in sys.modules)))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[1])  # the repository root: tests.tiny importable
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]"]
