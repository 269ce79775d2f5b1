"""pep_gp.core — the mathematics of pep: pure JAX functions of (params, data), float64, no I/O.

Numerical precision is explicit: every function computes in the dtype of its inputs. Entry points run
pep_gp.core under :func:`float64` (a scoped ``jax.enable_x64``), never by flipping a global flag at import.
"""

import jax


def float64():
    """Context manager that runs JAX in float64 for the enclosed block (scoped, not global)."""
    return jax.enable_x64(True)


__all__ = ["float64"]
