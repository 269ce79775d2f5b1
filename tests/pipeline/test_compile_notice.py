"""A first fit says what it is doing (issue 63, item 6): a program still compiling after a while is told in one
line of pep's display, and XLA's own slow-compile alarm (a C++ ERROR line) is silenced while a display is open."""

import io
import os
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.monitoring
import jax.numpy as jnp
import pytest
from rich.console import Console

from pep_gp.pipeline.engine import compilation
from pep_gp.pipeline.engine.compilation import COMPILE_EVENT, slow_compiles_told
from pep_gp.pipeline.training.display import progress_display

ROOT = Path(__file__).resolve().parents[2]


def _compile(name: str, seconds: float) -> None:
    """JAX's monitoring events of one compilation of ``name`` lasting ``seconds``, as ``pxla`` records them."""
    jax.monitoring.record_scalar(COMPILE_EVENT, time.time(), fun_name=name)
    time.sleep(seconds)
    jax.monitoring.record_event_duration_secs(COMPILE_EVENT, seconds, fun_name=name)


def test_jax_records_the_start_and_end_of_each_compilation():
    """The events :func:`slow_compiles_told` listens to exist (a JAX upgrade that renamed them fails here)."""
    starts, ends = [], []
    start = lambda event, value, **info: starts.append(info["fun_name"]) if event == COMPILE_EVENT else None
    end = lambda event, seconds, **info: ends.append(info["fun_name"]) if event == COMPILE_EVENT else None
    jax.monitoring.register_scalar_listener(start)
    jax.monitoring.register_event_duration_secs_listener(end)
    try:
        jax.jit(lambda x: jnp.sinh(x) * time.time_ns())(jnp.ones(3)).block_until_ready()  # a new program
    finally:
        jax.monitoring.unregister_scalar_listener(start)
        jax.monitoring.unregister_event_duration_listener(end)
    assert "jit(<lambda>)" in starts and starts == ends


def test_a_program_still_compiling_is_told_once_and_a_quick_one_is_not():
    told = []
    with slow_compiles_told(lambda program, seconds: told.append((program, seconds)), after=0.05):
        _compile("jit(slow)", 0.5)
        _compile("jit(quick)", 0.0)
    _compile("jit(after the block)", 0.5)
    assert told == [("jit(slow)", 0.05)]


def test_the_display_tells_a_slow_compile_and_says_nothing_when_off(monkeypatch, capfd):
    monkeypatch.setattr(compilation, "SLOW_COMPILE_SECONDS", 0.05)
    shown = io.StringIO()
    with progress_display(True, "SparseGPClassifier", Console(file=shown, width=200)):
        _compile("jit(step)", 0.5)
    assert "SparseGPClassifier: compiling jit(step), 0 s so far (this machine compiles it once: later fits load " \
           f"it from the cache in {jax.config.jax_compilation_cache_dir})" in shown.getvalue()
    with progress_display(False, "SparseGPClassifier"):
        _compile("jit(step)", 0.5)
    assert capfd.readouterr() == ("", "")


MARKED = """
import sys, jax, jax.numpy as jnp
from jax._src.lib import utils
from pep_gp.pipeline.engine.compilation import slow_compiles_told
utils.absl_set_global_vlog_level(1)  # XLA's C++ log writes lines through every compilation
with slow_compiles_told(None):
    print("MARK inside", file=sys.stderr, flush=True)
    jax.jit(lambda x: jnp.cos(x) * 3)(jnp.ones(5)).block_until_ready()
print("MARK after", file=sys.stderr, flush=True)
jax.jit(lambda x: jnp.tan(x) * 3)(jnp.ones(5)).block_until_ready()
"""


@pytest.mark.heavy
def test_xla_log_lines_are_off_while_a_program_compiles_and_back_after():
    """XLA's alarm is a C++ ERROR line written while a compilation runs; with the C++ log at its most verbose
    (``TF_CPP_MIN_LOG_LEVEL=0``), a compilation inside the block writes almost nothing (the few lines come from
    tracing and dispatch, outside the compilation) and one after it writes its usual hundreds."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0", "PEP_COMPILATION_CACHE": "off"}
    done = subprocess.run([sys.executable, "-c", MARKED], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    inside, after = done.stderr.split("MARK inside")[1].split("MARK after")
    assert len(inside.splitlines()) < 50 and len(after.splitlines()) > 200, (len(inside.splitlines()),
                                                                             len(after.splitlines()))
