"""Airline M = 200 per step across emulated hosts (issue 66): the coordinator and a TLS Dask scheduler on a
head host, each worker on a host of its own, every host a Linux network namespace whose link to a switch
has a rate (``tc`` tbf, both ways) and a one-way latency (a delaying TCP relay: this kernel has no
``netem``); the workers read the store at one path, as from a shared file system
(:mod:`tests.infra.namespaces`, which removes everything it made when a run ends or fails).

Usage (as root, Linux with iproute2; JAX on its CPU)::

    JAX_PLATFORMS=cpu python -m benchmarks.emulated_hosts [--store airline-classes.zarr] [--workers 1,2] \
        [--links 10gbit/0.1ms,1gbit/0.5ms,100mbit/2ms] [--steps 5] [--block-rows 625] [--inducing 200] \
        [--pinned]

For each link, the link itself is probed first from the head to a worker host through the relay: the
median round trip ``r`` of one byte and the rate ``β`` at which bytes cross it (what a Python relay
passes on a loaded machine may be less than the ``tc`` rate: the measured rate is the term). Then, for
each W, a fresh scheduler and W workers, and :func:`benchmarks.bench_engine.measure` run on the head
(``multiclass-sep``, M inducing points per class, 10,000-row steps in blocks of ``--block-rows`` rows, two
warm-up steps, ``--steps`` timed steps): seconds per step, the coordinator's part ``c``, one pass's
overhead ``L``, the busiest worker's computations ``p`` and the bytes on the wire per worker and step
``b`` (sent and received: the coordinator's TCP counters).

The scaling model of docs/results/benchmarks.md gains the network's terms, each measured, not fitted:
a step makes two passes, each a round trip to every worker, and the coordinator's link carries every
worker's bytes, so ``T(W) = c + 2 L₀ + p · ⌈n / W⌉ / n + 2 r + W · b / β``, with ``c``, ``p`` and ``b`` from
the one-worker run on the same link and ``L₀ = L − r − b / (2β)`` its pass overhead less the network's
share. It is checked against each measured W and predicts 32 and 128 hosts (a step cut into at least W
blocks: ``n = max(blocks, W)``), labelled as predictions. The hosts share this machine's cores: unpinned,
each worker's XLA uses them all and the workers compete; ``--pinned`` gives worker host ``i`` core
``i mod cores`` alone (hosts of one core, as ``local:N:pinned``), which needs as many idle cores as
workers for its speed-ups to mean anything (the table states the load).

Writes ``benchmarks/results/emulated_hosts.json`` and prints its table (docs/how-to/clusters.md).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks._common import ROOT, arguments, temporary_directory, uptime, write_results

PREDICTED_HOSTS = (32, 128)
BATCH = 10_000


def probe_bytes(link: Any) -> int:
    """Bytes to probe a link's rate with: a quarter second of it, within 1 and 64 MB."""
    return int(min(64e6, max(1e6, link.rate / 8 / 4)))


def measure_on(link: Any, workers: int, store: Path, args: argparse.Namespace, scratch: Path,
               certs: dict[str, str]) -> tuple[dict[str, Any], dict[str, float] | None]:
    """One fresh network with a head and ``workers`` worker hosts: :func:`benchmarks.bench_engine.measure`'s
    row, run on the head, and for one worker the link's probe."""
    from tests.infra.namespaces import IP, Cluster, Network, probe

    hosts = ["head"] + [f"w{i}" for i in range(1, workers + 1)]
    (scratch / "workers").mkdir(exist_ok=True)
    with Network(hosts, link, scratch / "logs" / f"{link.rate:g}-{workers}") as network:
        probed = probe(network, "w1", probe_bytes(link)) if workers == 1 else None
        cluster = Cluster(network, certs, scratch / "workers", pinned=args.pinned)
        cluster.start(hosts[1:])
        path = os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")])
        env = {**network.processes.env, **cluster.client_env, "PYTHONPATH": path}
        command = [IP, "netns", "exec", network.namespace("head"), sys.executable, "-m", "benchmarks.bench_engine",
                   "--one", str(store), str(args.inducing), cluster.address, str(args.steps),
                   "--block-rows", str(args.block_rows)]
        output = subprocess.run(command, env=env, capture_output=True, text=True, cwd=ROOT, timeout=3600)
        if output.returncode:
            raise RuntimeError(f"{link.label}, W = {workers}: {output.stderr[-3000:]}")
        return json.loads(output.stdout.strip().splitlines()[-1]), probed


def model(one: dict[str, Any], probed: dict[str, float], blocks: int) -> tuple[dict[str, Any], Callable[[int], float]]:
    """The scaling model's terms for one link (the module docstring), and its seconds per step on W hosts."""
    r, beta = probed["round_trip_seconds"], probed["rate_bytes_per_second"]
    b = one["wire_bytes_per_worker"] or one["payload_bytes_per_worker"]
    c, p = one["coordinator_seconds"], one["worker_seconds"]
    local_overhead = one["pass_overhead_seconds"] - r - b / (2 * beta)

    def seconds(w: int) -> float:
        n = max(blocks, w)
        return c + 2 * local_overhead + p * math.ceil(n / w) / n + 2 * r + w * b / beta

    return {"coordinator_seconds": c, "worker_seconds": p, "pass_overhead_seconds": one["pass_overhead_seconds"],
            "local_pass_overhead_seconds": round(local_overhead, 5), "round_trip_seconds": round(r, 6),
            "rate_bytes_per_second": round(beta), "bytes_per_worker": b}, seconds


def summarise(runs: dict[str, dict[str, Any]], workers: list[int], blocks: int) -> dict[str, Any]:
    """Per link: the model's terms, each measured W's seconds and speed-up beside the model's, and the
    predictions for :data:`PREDICTED_HOSTS`."""
    out = {}
    for label, run in runs.items():
        terms, seconds = model(run["rows"]["1"], run["probe"], blocks)
        one = run["rows"]["1"]
        measured = {str(w): {"seconds_per_step": run["rows"][str(w)]["seconds_per_step"],
                             "min_seconds_per_step": run["rows"][str(w)]["min_seconds_per_step"],
                             "speedup_median": round(one["seconds_per_step"] / run["rows"][str(w)]["seconds_per_step"], 2),
                             "speedup_min": round(one["min_seconds_per_step"] / run["rows"][str(w)]["min_seconds_per_step"], 2),
                             "model_seconds_per_step": round(seconds(w), 4),
                             "model_speedup": round(seconds(1) / seconds(w), 2)} for w in workers}
        predicted = {str(w): {"seconds_per_step": round(seconds(w), 4), "speedup_over_one": round(seconds(1) / seconds(w), 2)}
                     for w in PREDICTED_HOSTS}
        out[label] = {"terms": terms, "measured": measured, "predicted": predicted}
    return out


def table(result: dict[str, Any]) -> str:
    """The how-to's tables of one run."""
    lines = ["| link (set) | round trip, rate (measured) | W | s / step (median, min) | speed-up over W = 1 "
             "(median, min) | model: s / step, speed-up | coordinator, s | pass overhead, ms | busiest worker, s "
             "| on the wire / worker |", "|---|---|---|---|---|---|---|---|---|---|"]
    for label, run in result["runs"].items():
        summary = result["summary"][label]
        terms = summary["terms"]
        for w, row in run["rows"].items():
            m = summary["measured"][w]
            lines.append(f"| {label} | {1e3 * terms['round_trip_seconds']:.2f} ms, "
                         f"{8 * terms['rate_bytes_per_second'] / 1e6:,.0f} Mbit/s | {w} "
                         f"| {row['seconds_per_step']:.4f}, {row['min_seconds_per_step']:.4f} "
                         f"| {m['speedup_median']:.2f}×, {m['speedup_min']:.2f}× "
                         f"| {m['model_seconds_per_step']:.4f}, {m['model_speedup']:.2f}× "
                         f"| {row['coordinator_seconds']:.4f} | {1e3 * row['pass_overhead_seconds']:.1f} "
                         f"| {row['worker_seconds']:.4f} | {(row['wire_bytes_per_worker'] or 0) / 1e6:.3f} MB |")
    lines += ["", "Predictions (not measured) of the model with these terms, a step cut into at least W blocks:", "",
              "| link (set) | " + " | ".join(f"{w} hosts: s / step, speed-up" for w in PREDICTED_HOSTS) + " |",
              "|---|" + "---|" * len(PREDICTED_HOSTS)]
    for label, summary in result["summary"].items():
        lines.append(f"| {label} | " + " | ".join(
            f"{summary['predicted'][str(w)]['seconds_per_step']:.4f}, {summary['predicted'][str(w)]['speedup_over_one']:.2f}×"
            for w in PREDICTED_HOSTS) + " |")
    config = result["config"]
    lines += ["", f"{result['label']} ({result['machine']['cpus']} cores, JAX {result['machine']['jax']} on the CPU); "
              f"M = {config['num_inducing']}, {BATCH:,}-row steps in {config['blocks']} blocks of "
              f"{config['block_rows']} rows, {config['steps']} timed steps. "
              f"Load: {result['uptime_before']} before, {result['uptime_after']} after."]
    return "\n".join(lines)


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.emulated_hosts``."""
    parser = arguments(__doc__, steps=5, name="emulated_hosts")
    parser.add_argument("--store", type=Path, help="airline store with 3 classes; ingested if absent")
    parser.add_argument("--workers", default="1,2", help="comma-separated worker host counts (1 is always run)")
    parser.add_argument("--links", default="10gbit/0.1ms,1gbit/0.5ms,100mbit/2ms",
                        help="comma-separated links RATE/LATENCY (one way) (default: %(default)s)")
    parser.add_argument("--block-rows", type=int, default=625)
    parser.add_argument("--inducing", type=int, default=200, help="M per class (default: %(default)s)")
    parser.add_argument("--pinned", action="store_true", help="worker host i on core i mod cores only (hosts of one core)")
    parser.add_argument("--label", default="this machine", help="where it ran, for the table")
    return parser


def main() -> None:
    parser = cli()
    args = parser.parse_args()
    from tests.infra.loopback import cluster_certs
    from tests.infra.namespaces import Link, namespaces_unavailable

    if (reason := namespaces_unavailable()) is not None:
        parser.error(reason)
    if BATCH % args.block_rows:
        parser.error(f"--block-rows {args.block_rows} does not divide the {BATCH:,}-row step")
    links = [Link.parse(text) for text in args.links.split(",")]
    workers = sorted({int(w) for w in args.workers.split(",")} | {1})
    blocks = BATCH // args.block_rows
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a terminated run still removes its namespaces
    from benchmarks._multiclass_run import airline_classes

    before = uptime()
    runs: dict[str, dict[str, Any]] = {}
    with temporary_directory() as scratch:
        store = args.store or airline_classes(scratch)
        certs = cluster_certs(scratch / "certs")
        for text, link in zip(args.links.split(","), links):
            run: dict[str, Any] = {"rate_bits_per_second": link.rate, "latency_seconds": link.latency, "rows": {}}
            for w in workers:
                row, probed = measure_on(link, w, store, args, scratch, certs)
                run["rows"][str(w)] = row
                run["probe"] = probed or run["probe"]
                print({"link": text, "workers": w, **row, **(probed or {})}, flush=True)
            runs[text] = run
    path = write_results(args.name, {
        "label": args.label, "store": str(args.store or "bundled airline flights, 3 classes"), "model": "multiclass-sep",
        "config": {"num_inducing": args.inducing, "batch_size": BATCH, "block_rows": args.block_rows, "blocks": blocks,
                   "steps": args.steps, "tls": True, "pinned": args.pinned, "latency": "one way, per link (a relay per server)"},
        "uptime_before": before, "uptime_after": uptime(), "runs": runs, "summary": summarise(runs, workers, blocks)})
    print(table(json.loads(path.read_text())))


if __name__ == "__main__":
    main()
