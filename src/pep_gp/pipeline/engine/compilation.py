"""JAX's persistent compilation cache, on by default for every process that trains, predicts or computes blocks.

A training step compiles a handful of large XLA programs (seconds each on a 2-core CPU); without a
persistent cache every new process — a second ``pep train``, an estimator's fit in a new notebook, every
Dask worker — compiles them again. :func:`use_compilation_cache` points JAX's cache (``jax_compilation_cache_dir``)
at a per-user directory, so a later process loads the compiled programs instead. A loaded program is the
same executable, so results are bit-identical to a compiled one (tests/pipeline/test_compilation.py).

``$PEP_COMPILATION_CACHE`` chooses: unset or ``on``, the per-user cache directory (the default:
``platformdirs.user_cache_dir``, e.g. ``~/.cache/pep/jax``); ``off``, no persistent cache; any other value,
that directory. A directory the user set for JAX itself (``JAX_COMPILATION_CACHE_DIR`` or ``jax.config``) is
kept when the variable is unset. The directory holds at most :data:`CACHE_LIMIT_BYTES`, least recently used
programs out first. Every fitting loop (:func:`ready_to_compile`: the trainer, so the CLI and the estimators,
and the untied EP fits' own loops), the predictions
(:func:`~pep_gp.pipeline.models.predictive.predict_in_blocks`: ``pep predict`` and a loaded model) and the
Dask worker plugin (:class:`~pep_gp.pipeline.engine.backends.WorkerEngine`) call it; each process reads its
own environment (a ``LocalCluster``'s workers inherit the coordinator's).

The cache was off by default after one segmentation fault, in a test process that had compiled programs for
40 minutes, while a program was being written to a directory other processes wrote to as well. The cache
was not its cause: every program XLA compiles for a CPU keeps its own memory mappings and JAX keeps every
program, so a process that compiles thousands reaches Linux's ``vm.max_map_count`` (65,530), and the next
compilation's mapping fails inside XLA and ends the process, cache or no cache (the same crash with no cache:
jax-ml/jax#27201, XLA's ``contiguous_section_memory_manager``). Reproduced with jax 0.10.2
(benchmarks/bench_cache_default.py ``--limit``): a process taken to 600 mappings short of the limit compiled
153 programs with the cache and 155 without, and both ended alike, XLA's "LLVM compilation error: Cannot
allocate memory" then a segmentation fault. Two processes compiling distinct programs into one cache directory
for 3 minutes, every program written (no minimum compile time or size) and each loading some the other wrote,
ran clean and held 4.9 mappings per program, as a process without the cache (4.8): about 13,000 such programs
reach the limit, with or without the cache. The trainer and the test suite release the compiled programs
before half the limit (:func:`release_compiled_programs_if_crowded`).

JAX treats the cache as trusted code: the directory is created readable by its owner only, and a shared
or world-writable directory should never be configured.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import InputError

COMPILATION_CACHE_ENV = "PEP_COMPILATION_CACHE"
CACHE_LIMIT_BYTES = 2 * 2**30
"""Least recently used programs are evicted beyond this size (also makes JAX lock the directory with
``filelock`` while it reads or writes, so concurrent workers never read a half-written entry)."""
MIN_COMPILE_SECONDS = 0.1
"""Programs that compile faster than this are not written, but those of pep's fits and predictions
(:func:`every_program_cached`). JAX's default, 1 s, leaves most of a small model's
programs out (a later process then compiles those itself); none at all writes every single array operation run
eagerly too (tens of milliseconds each to compile), thousands of entries in a long session, and JAX's
size-limited cache reads every entry's size and access time at each write (measured: 0.19 s per write at 5,800
entries, under its lock, so the processes sharing the directory wait for each other)."""


def default_cache_dir() -> Path:
    """The per-user cache directory, ``platformdirs.user_cache_dir("pep")/jax``."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("pep")) / "jax"


def compilation_cache_dir() -> Path | None:
    """The directory ``$PEP_COMPILATION_CACHE`` asks for (see the module docstring): the per-user one when unset
    or ``on``, None for ``off``.

    Raises:
        InputError: the value names something that is not a directory.
    """
    value = os.environ.get(COMPILATION_CACHE_ENV, "").strip()
    if value.lower() == "off":
        return None
    if not value or value.lower() == "on":
        return default_cache_dir()
    path = Path(value).expanduser()
    if path.exists() and not path.is_dir():
        raise InputError(f"{COMPILATION_CACHE_ENV}: expected 'on', 'off' or a directory, found {value!r} "
                         "(not a directory)")
    return path


def use_compilation_cache() -> Path | None:
    """Point this process's JAX persistent compilation cache at :func:`compilation_cache_dir`; returns
    the directory in use (None: no persistent cache). Idempotent; takes effect for the next compilation
    even after JAX has compiled programs in this process.

    With ``$PEP_COMPILATION_CACHE`` unset, a per-user directory that cannot be created (a read-only home, as
    in some containers) leaves the cache off with a ``RuntimeWarning``.

    Raises:
        InputError: ``$PEP_COMPILATION_CACHE`` is not ``on``, ``off`` or a usable directory.
    """
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    configured = jax.config.jax_compilation_cache_dir
    if not os.environ.get(COMPILATION_CACHE_ENV) and configured and configured != str(default_cache_dir()):
        return Path(configured)  # the user's own JAX setting
    path = compilation_cache_dir()
    wanted = None if path is None else str(path)
    if wanted is not None:
        try:
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as error:
            if os.environ.get(COMPILATION_CACHE_ENV, "").strip():
                raise InputError(f"{COMPILATION_CACHE_ENV}: cannot create the directory {path} ({error.strerror})"
                                 ) from None
            warnings.warn(f"no persistent compilation cache: cannot create the per-user directory {path} "
                          f"({error.strerror}); set {COMPILATION_CACHE_ENV} to a writable directory, or to off",
                          RuntimeWarning, stacklevel=2)
            path = wanted = None
    if configured == wanted:
        return path
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    jax.config.update("jax_compilation_cache_max_size", CACHE_LIMIT_BYTES)
    compilation_cache.set_cache_dir(wanted)
    compilation_cache.reset_cache()  # JAX decides once per process whether to use the cache: decide again
    return path


MAPS_FRACTION = 0.5
"""Compiled programs are released once the process holds more than this fraction of the kernel's limit on
memory mappings (``vm.max_map_count``)."""


def release_compiled_programs_if_crowded() -> bool:
    """Release every compiled program of this process (``jax.clear_caches``) when its memory mappings
    exceed :data:`MAPS_FRACTION` of ``vm.max_map_count``; returns whether it did.

    Each program XLA compiles for a CPU keeps its own memory mappings, and JAX keeps every program it
    compiled. A process that compiles thousands of them — a long notebook session, a large grid search,
    scikit-learn's ``check_estimator`` over several estimators — reached Linux's default limit of 65,530
    mappings, after which the next compilation ended the process with a segmentation fault (measured:
    5,000–7,000 mappings per estimator's checks; 2,078 again after ``jax.clear_caches()``). Programs
    released here are compiled again when next used. Linux only (elsewhere: nothing to check).
    """
    try:
        limit = int(Path("/proc/sys/vm/max_map_count").read_text())
        with open("/proc/self/maps", "rb") as maps:
            held = sum(1 for _ in maps)
    except (OSError, ValueError):
        return False
    if held <= MAPS_FRACTION * limit:
        return False
    import gc

    import jax

    jax.clear_caches()
    gc.collect()
    return True


def ready_to_compile() -> Path | None:
    """What every fitting loop does before it compiles (the trainer, the untied EP fits' loops): release this
    process's compiled programs if it is crowded (:func:`release_compiled_programs_if_crowded`), then point JAX
    at the persistent cache (:func:`use_compilation_cache`, whose directory it returns), so that a second process
    loads the programs.

    Raises:
        InputError: ``$PEP_COMPILATION_CACHE`` is not ``on``, ``off`` or a usable directory.
    """
    release_compiled_programs_if_crowded()
    return use_compilation_cache()


@contextmanager
def every_program_cached() -> Iterator[None]:
    """While the block runs (or the function it decorates), every program this thread compiles is written to the
    persistent cache, however quickly it compiled; :data:`MIN_COMPILE_SECONDS` holds for the rest of the process.

    A fit and its predictions run pep's own programs only, no array operation eagerly
    (tests/pipeline/test_compilation.py), so inside them the threshold would only leave out their small programs
    (an energy, the optimiser's start: 0.12 s of boston's ``SparseGPRegressor()`` fit in a second process, compiled
    again each time), while a user's own eager operations, run outside, stay out of the cache. The setting is
    JAX's ``jax_persistent_cache_min_compile_time_secs`` in its thread-local form, which is not part of a
    program's key: a program compiled inside is the one called outside."""
    from jax._src import config  # the thread-local states of jax.config's options

    with config.persistent_cache_min_compile_time_secs(0.0):
        yield


SLOW_COMPILE_SECONDS = 10.0
"""A program still compiling after this many seconds is told (:func:`slow_compiles_told`); issue 63 asks that no
program of a default fit take longer here."""
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
"""JAX's monitoring event around each backend compilation (or persistent-cache load): a scalar, the start time,
when it starts, and a duration when it ends, both with the program's ``fun_name``."""
_QUIET_CPP_LEVEL = 3  # absl's FATAL: XLA's ERROR lines are not written
CPP_LOG_LEVELS = {"CRITICAL": 3, "FATAL": 3, "ERROR": 2, "WARN": 1, "WARNING": 1, "INFO": 0, "DEBUG": 0}
"""``jax_logging_level`` to the C++ minimum severity JAX sets with it (absl's: 0 info … 3 fatal)."""


def _cpp_log_level() -> int:
    """The minimum severity of XLA's C++ log lines this process had: JAX's ``jax_logging_level`` when set, else
    ``$TF_CPP_MIN_LOG_LEVEL``, else 1: warnings and errors (jaxlib writes no INFO line by default, measured; that
    it writes warnings is assumed)."""
    import jax

    configured = jax.config.jax_logging_level
    if configured and configured != "NOTSET":
        return CPP_LOG_LEVELS[configured]
    try:
        return int(os.environ.get("TF_CPP_MIN_LOG_LEVEL", "1"))
    except ValueError:
        return 1


@contextmanager
def slow_compiles_told(tell: Callable[[str, float], None] | None, after: float | None = None) -> Iterator[None]:
    """While the block runs, XLA's own slow-compile alarm is silenced and, with ``tell``, each program still
    compiling after ``after`` seconds (default :data:`SLOW_COMPILE_SECONDS`) is told once, as
    ``tell(program_name, seconds)``, from a timer thread.

    XLA writes its alarm ("The operation took 2m39s … Very slow compile? If you want to file a bug …") as a C++
    ERROR log line once a compilation has taken two minutes; nothing in Python can filter one C++ line, so XLA's
    C++ log lines below FATAL are switched off from the start to the end of each compilation
    (:data:`COMPILE_EVENT`), whatever else they would have said in that window, and back on between
    compilations (tests/pipeline/test_compile_notice.py). A failing compilation still raises its error in Python.
    """
    import jax.monitoring
    from jax._src.lib import utils

    after = SLOW_COMPILE_SECONDS if after is None else after
    lock, timers, level = threading.Lock(), {}, _cpp_log_level()

    def started(event: str, value: float, **info: Any) -> None:
        if event != COMPILE_EVENT:
            return
        name = str(info.get("fun_name", "a program"))
        timer = threading.Timer(after, tell, (name, after)) if tell is not None else None
        with lock:
            if not timers:
                utils.absl_set_min_log_level(_QUIET_CPP_LEVEL)
            timers[threading.get_ident()] = timer
        if timer is not None:
            timer.daemon = True
            timer.start()

    def ended(event: str, seconds: float, **info: Any) -> None:
        if event != COMPILE_EVENT:
            return
        with lock:
            timer = timers.pop(threading.get_ident(), None)
            if not timers:
                utils.absl_set_min_log_level(level)
        if timer is not None:
            timer.cancel()

    jax.monitoring.register_scalar_listener(started)
    jax.monitoring.register_event_duration_secs_listener(ended)
    try:
        yield
    finally:
        jax.monitoring.unregister_scalar_listener(started)
        jax.monitoring.unregister_event_duration_listener(ended)
        with lock:
            for timer in timers.values():
                if timer is not None:
                    timer.cancel()
            if timers:
                utils.absl_set_min_log_level(level)
            timers.clear()
