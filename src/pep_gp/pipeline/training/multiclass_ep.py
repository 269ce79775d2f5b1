"""A training path beside the trainer: the multi-class GP classifier of Villacampa-Calvo & Hernández-Lobato
(2017) with *untied* factors (one per training row and class, memory O(N·C·M); for N up to ~10⁴), trained
in this process as one compiled ``lax.scan`` per window of steps. The rows are padded to a few sizes
(:func:`~pep_gp.pipeline.data.sizes.bucket`; masked rows, no factors), so the folds of a cross-validation
and other refits on nearby row counts share the compiled steps.

Each step (§2.3): the parallel EP update of the factors of the step's rows (:func:`pep_gp.core.models.
multiclass_ep.update`, damped by ``ρ_t``, halved for the rest of the run whenever a row had to be skipped
for an improper cavity), then one guarded Adam ascent step on the hyper-parameters and inducing inputs with
the gradient of eq. (10) (the cavity held fixed; the data term scaled by ``N/|B|``). Minibatches follow a
seeded permutation per epoch.
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from threadpoolctl import threadpool_limits

from ...core import float64
from ...core.models import multiclass_ep as ep
from ...core.models.multiclass import MultiClassGP, NaturalFactor
from ...core.parameters import fixed_leaves, on_device
from ..data.sizes import bucket
from ..engine.compilation import every_program_cached, ready_to_compile
from .optimiser import adam
from .step import ascent_update
from .stopping import COLLAPSE_FALL, StoppingRule


class UntiedFit(NamedTuple):
    """The outcome of :func:`fit`."""

    params: Any
    sites: ep.EPSites
    energies: np.ndarray  # the log Z_q estimate of every step
    log_evidence: float  # log Z_q (eq. 9) on all rows at the end
    rejected_steps: int  # non-finite Adam steps skipped
    skipped_rows: int  # row updates skipped for an improper cavity
    converged: bool
    collapse: str | None = None  # how the fit fell from its best, which it then ends at (None: it did not)


def optimizer(learning_rate, fixed_noise: bool = False):
    """Adam on hyper-parameters (the classes' noises but when ``fixed_noise``), inducing inputs and the classes'
    mean functions; the factors move only by EP updates."""
    return adam(learning_rate, frozen=lambda p: p._replace(
        kernel=fixed_leaves(p.kernel), raw_noise=fixed_noise, inducing=False, factor=NaturalFactor(True, True),
        mean=jax.tree_util.tree_map(lambda _: False, p.mean)))


@partial(jax.jit, static_argnums=(0, 1))
def _optimizer_state(learning_rate: float, fixed_noise: bool, params):
    """:func:`optimizer`'s starting state in one program (op by op, each leaf's zeros were programs of their own),
    compiled once per process for its settings: a refit, a fold, shares it."""
    return optimizer(learning_rate, fixed_noise).init(params)


def _step(model: MultiClassGP, params, opt_state, state: ep.EPSites, index, x, y, mask, n_total, damping, learning_rate,
          fixed_noise):
    # Padding rows carry the out-of-range index N: gathered as zeros, dropped when scattered back.
    rows_state = jax.tree_util.tree_map(lambda a: a.at[index].get(mode="fill", fill_value=0.0), state)
    params, rows_state, skipped = ep.update(model, params, rows_state, x, y, mask, damping)
    state = jax.tree_util.tree_map(lambda a, r: a.at[index].set(r, mode="drop"), state, rows_state)
    rows = jnp.sum(mask)
    energy = lambda p: ep.global_energy(model, p) + n_total / rows * ep.local_energy(model, p, rows_state, x, y, mask)
    value, grad = jax.value_and_grad(energy)(params)
    params, opt_state, ok = ascent_update(optimizer(learning_rate, fixed_noise), params, opt_state, value, grad)
    return params, opt_state, ok, value, skipped, state


@partial(jax.jit, static_argnames=("model", "fixed_noise"))
def _steps(model: MultiClassGP, carry, x, y, num_rows, index, mask, damping, learning_rate, fixed_noise=False):
    """Steps as one ``lax.scan`` over the per-step row indices ``[T, S]``, masks and base damping ``[T]``,
    from and to ``carry = (params, opt_state, sites, halvings)``; ``x, y`` are the ``num_rows`` training rows
    and padding; ``fixed_noise`` keeps the classes' noises where they are."""

    def step(carry, inputs):
        params, opt_state, state, halvings = carry
        rows, rows_mask, rho = inputs
        params, opt_state, ok, value, skipped, state = _step(
            model, params, opt_state, state, rows, x[rows], y[rows], rows_mask, num_rows,
            rho * 0.5**halvings, learning_rate, fixed_noise)
        return (params, opt_state, state, halvings + (skipped > 0)), (value, ok, skipped)

    return jax.lax.scan(step, carry, (index, mask, damping))


def batches(n_rows: int, batch_size: int | None, num_steps: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Row indices ``[T, S]`` and masks ``[T, S]``, every epoch a new permutation; a minibatch is padded with the
    index ``n_rows``, the full batch (``S = bucket(n_rows)``) with the padding rows' own indices."""
    if batch_size is None or batch_size >= n_rows:
        index = np.tile(np.arange(bucket(n_rows)), (num_steps, 1))
        return index, index < n_rows
    rng = np.random.default_rng(seed)
    per_epoch = -(-n_rows // batch_size)
    orders = [rng.permutation(n_rows) for _ in range(max(1, -(-num_steps // per_epoch)))]
    padded = np.stack([np.concatenate([o, np.full(per_epoch * batch_size - n_rows, n_rows)]) for o in orders])
    index = padded.reshape(-1, batch_size)[:num_steps]
    return index, index < n_rows


@every_program_cached()
@threadpool_limits.wrap(limits=1, user_api="blas")  # see the docstring's last paragraph
def fit(model: MultiClassGP, x, y, num_inducing: int, *, batch_size: int | None, max_steps: int, tol: float,
        learning_rate: float, damping, seed: int, kernel=None, mean=None, noise: float = 1.0,
        fixed_noise: bool = False) -> UntiedFit:
    """Train from the model's initial state for at most ``max_steps`` steps, a window of steps per compiled
    call, until the stopping rule (:mod:`pep_gp.pipeline.training.stopping`) says converged.

    A fit that collapses ends at its best window instead, as the trainer's runs do: its last window mean, or
    the log evidence at the end, more than :data:`~pep_gp.pipeline.training.stopping.COLLAPSE_FALL` nats per
    row below the best window mean (too large an Adam step on the hyper-parameters leaves the damped factors
    behind, and the evidence falls while the step energies still look level).

    Args:
        model: the multi-class model; ``x`` ``[N, D]`` standardised rows, ``y`` ``[N]`` labels 0..C−1.
        damping: ``t ↦ ρ_t``, the factor update's step (a schedule of steps).
        kernel: the kernel every class starts from (:meth:`~pep_gp.core.models.multiclass.MultiClassGP.init`;
            None: the ARD squared exponential).
        mean: the mean function every class starts from (None: zero).
        noise: the latent noise ``σ_{0,c}`` every class starts from; ``fixed_noise`` keeps it there, to the bit.

    The loop runs with one BLAS thread (threadpoolctl). Its steps factorise each class's ``M × M`` matrices with
    LAPACK (jaxlib calls scipy's OpenBLAS from XLA's own threads), and OpenBLAS's second thread fought XLA's:
    inside a step a 50 × 50 triangular solve took 1.7 ms, against 23 µs called alone. With one thread the
    default fit on satellite's first three classes (2,400 rows) took 49.6 s instead of 84.5 s and on glass
    13.4 s instead of 18.5 s (in a process that had compiled it, this 2-core machine idle, 12-05), with the same
    bits. The trainer's models and the exact EP loop gained nothing so (``ExactGPClassifier`` on pima lost: 1.6 s
    against 1.3 s, its ``N × N`` factorisation uses both threads), so they keep OpenBLAS's own count.
    """
    ready_to_compile()
    n = x.shape[0]
    rule = StoppingRule.for_run(tol, n, 1 if batch_size is None else -(-n // batch_size))
    index, mask = batches(n, batch_size, max_steps, seed)
    rho = np.asarray(damping(np.arange(max_steps)), np.float64)
    values, ok, skipped = np.zeros(0), np.zeros(0, bool), np.zeros(0, int)
    padding = bucket(n) + 1 - n  # at least one row: the minibatches' padding index n
    with float64():
        params = model.init(x, num_inducing, kernel=kernel, noise=noise, seed=seed, mean=mean)
        x = on_device(np.concatenate([x, np.zeros((padding, x.shape[1]), x.dtype)]))
        y = on_device(np.concatenate([y, np.zeros(padding, y.dtype)]))
        carry = (params, _optimizer_state(float(learning_rate), bool(fixed_noise), params),
                 ep.init_sites(x.shape[0], params), on_device(0))
        best_mean, best = float("-inf"), (0, carry)
        while values.size < max_steps and not rule.converged(values):
            window = slice(values.size, min(max_steps, values.size + rule.window))
            carry, out = _steps(model, carry, x, y, on_device(float(n)), on_device(index[window]),
                                on_device(mask[window]), on_device(rho[window]), float(learning_rate),
                                fixed_noise=fixed_noise)
            values, ok, skipped = (np.concatenate([a, np.asarray(b)]) for a, b in zip((values, ok, skipped), out))
            if rule.window_mean(values) > best_mean:
                best_mean, best = rule.window_mean(values), (values.size, carry)
        rows = on_device(np.arange(x.shape[0]) < n)
        evidence = float(ep.log_evidence(model, carry[0], carry[2], x, y, rows))
        collapse = None
        if rule.collapsed(best_mean, values) or (best_mean - evidence) / n > COLLAPSE_FALL:
            collapse = (f"the log evidence fell from its best window mean {best_mean:.6g} (steps up to {best[0]}) to "
                        f"{evidence:.6g} at step {values.size} (last window mean {rule.window_mean(values):.6g}); the "
                        f"fit ends at step {best[0]}: a smaller learning_rate fits more steadily")
            carry = best[1]
            evidence = float(ep.log_evidence(model, carry[0], carry[2], x, y, rows))
        params, _, sites, _ = carry
    sites = jax.tree_util.tree_map(lambda a: np.asarray(a)[:n], sites)  # numpy: no program per n
    return UntiedFit(params, sites, values, evidence, int(np.sum(~ok)), int(np.sum(skipped)),
                     rule.converged(values) and collapse is None, collapse)
