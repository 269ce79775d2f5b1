"""Issue 62, item 9: ``import pep_gp`` did not make ``pep_gp.kernels`` reachable (GPflow's and GPyTorch's
top-level imports do). Now the package's public modules are attributes of ``pep_gp``, imported when first
used, so that ``import pep_gp`` still loads no JAX."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.heavy
def test_pep_gp_kernels_is_reachable_from_import_pep_gp_and_loaded_when_used():
    script = ("import sys, pep_gp\nbefore = 'jax' in sys.modules\nkernel = pep_gp.kernels.Matern52() + pep_gp.kernels.Linear()\n"
              "print(before, type(kernel).__name__, 'kernels' in dir(pep_gp), pep_gp.kernels is sys.modules['pep_gp.kernels'])")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "Sum", "True", "True"]
