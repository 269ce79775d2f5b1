"""What the tests of a fault under ``pep train --cluster …`` share (a scheduler lost for good,
tests/infra/test_scheduler_loss.py; a worker host's link down or slow, tests/infra/test_emulated_hosts.py): the
model and config they train, when the fault lands, and the newest checkpoint of a run directory. Their store
and the undisturbed in-process run they compare bits with are fixtures of tests/infra/conftest.py, made once
per test process (the tests are one pytest-xdist group, so one process).

:data:`STEPS` only needs to leave steps to run after the fault: the fault is one event (a call that fails
after a timeout, a step waited for), and what follows it is the same for every step left. A fault lands
once the run has checkpointed step :data:`FAULT_AT` (a checkpoint every 4 steps), so the run has compiled
its programs and sent the workers their blocks, and :data:`STEPS` − :data:`FAULT_AT` steps are still to go."""

from __future__ import annotations

import subprocess
from pathlib import Path

from pep_gp.pipeline.runs.checkpoint import checkpoint_dir
from tests.infra.loopback import wait_until
from tests.trainstores import FAST

MODEL = "sparse-gp-classifier"
CONFIG = FAST.model_copy(update={"epochs": 8})  # 400 training rows in batches of 96: 5 steps an epoch
STEPS = 40
FAULT_AT = 8


def newest_step(run_dir: Path) -> int:
    """The step of the run directory's newest complete checkpoint (one with a manifest); 0 when none."""
    steps = [int(p.parent.name.removeprefix("step-")) for p in checkpoint_dir(run_dir).glob("step-*/manifest.json")]
    return max(steps, default=0)


def wait_for_the_fault_point(training: subprocess.Popen, run_dir: Path) -> None:
    """Return once ``pep train`` (the process ``training``) has checkpointed step :data:`FAULT_AT`, or ended."""
    wait_until(lambda: newest_step(run_dir) >= FAULT_AT or training.poll() is not None, 300,
               f"a checkpoint at step {FAULT_AT}")
