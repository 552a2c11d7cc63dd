"""FSPV's gauge against the online objective: which one measures what an iteration did.

FSPV's interval adjustor judges its probes and stages on each iteration's progress
(``Observation.progress``, FSP paper §3.3).  For every observation of an FSPV run (without
migration: the ``fspv-off`` preset) on the simulated cluster (``tests/fakes.py``: the real
kernels and server, a simulated clock) this prints three measures of what the iteration did:

* ``exact``: f(θ_t) − f(θ_{t+1}) on all the data (the truth);
* ``gauge``: the progress the adjustor observed, the gauge's paired difference on a fixed
  stratified subset of the master's sample (:mod:`flegel.interval.gauge`);
* ``online``: the change of the online estimate (``Server.estimated_objective``), what the
  adjustor read before the gauge;

and, per algorithm, how each follows the truth: the correlation over the observations, the
share of observations whose sign is the truth's, and the median relative error
``|m − exact| / |exact|``.  No times: the simulated clock makes every number reproducible.

Run: ``python bench/gauge_fidelity.py [--algorithms kmeans,gmm,fcm,nmf] [--points N]
[--iterations T] [--gauge-points M] [--rows] [--cost]`` (the data are ``flegel paper``'s
quick workloads, made afresh, strided shards over 4 workers; ``--points`` keeps the first N
rows; M: the gauge's subset, fixed -- a real run's budget gave 256-470 points on these, 2
shared cores; ``--rows``: every observation's three measures, e.g. GMM's first probes;
``--cost``: the wall time of one ``evaluate`` call on the master's side for 16, 64, 370 and
2,048 rows at θ⁰, the median of 50 calls -- what one call over the gauge's subset saves
against a call per 64-row chunk; this one has a clock, so it moves with the load).
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flegel.block import Block  # noqa: E402
from flegel.job.algorithms import resolve_algorithm  # noqa: E402
from tests.fakes import Simulation  # noqa: E402

WORKERS = 4


def workload(name: str, points: int) -> tuple[np.ndarray, dict[str, Any]]:
    """``flegel paper``'s quick data of ``name`` (made in a scratch folder; its first
    ``points`` rows, 0: all) and the job's parameters."""
    from flegel.cli.paper.workloads import QUICK, workloads, write_data

    w = workloads(QUICK)[name]
    with tempfile.TemporaryDirectory() as tmp:
        x = np.load(write_data(w, Path(tmp)))
    return np.asarray(x[:points] if points else x), w.params


def run(name: str, x: np.ndarray, params: dict[str, Any], iterations: int,
        sample_rows: int, points: int) -> list[tuple[str, float, float, float]]:
    """(phase, exact, gauge, online) per observation of one FSPV run."""
    alg = resolve_algorithm(name)(**params)
    shards = [x[i::WORKERS] for i in range(WORKERS)]
    sim = Simulation("fsp", {"interval": "multistage", "migration": {"mode": "off"}},
                     workers=WORKERS, shards=shards, algorithm=alg, sample_rows=sample_rows,
                     cost_s=1e-6, jitter=0.1, stop={"max_iterations": iterations},
                     max_sim_s=600)
    pol, srv = sim.policy, sim.server
    if points:
        # The subset of a real run's budget (the simulated clock prices evaluations at 0 s).
        pol.gauge.share, pol.gauge.floor = 0.0, points
        pol.gauge.n = pol.gauge._chunks_for(points)
    everything = Block.from_arrays(x)
    start: dict[str, Any] = {}
    rows: list[tuple[str, float, float, float]] = []
    broadcast, observe = pol.broadcast, pol.adjustor.observe

    def on_broadcast() -> None:
        broadcast()
        start["theta"] = copy.deepcopy(srv.theta)

    def on_observe(obs: Any) -> Any:
        exact = alg.evaluate(start["theta"], everything) - alg.evaluate(srv.theta, everything)
        online = pol._start_estimate - srv.estimated_objective()
        rows.append((pol.plan.phase, exact, obs.progress, online))
        return observe(obs)

    pol.broadcast, pol.adjustor.observe = on_broadcast, on_observe  # type: ignore[method-assign]
    sim.run()
    print(f"  {name}: {pol.gauge.summary()['progress_measure']}, "
          f"{pol.gauge.summary()['gauge_points']:.0f} points per evaluation, "
          f"stages {[round(s['eta_s'] * 1e3, 2) for s in pol.adjustor.stages]} ms, "
          f"refits {pol.adjustor.refits}")
    return rows


def call_cost(name: str, x: np.ndarray, params: dict[str, Any]) -> None:
    """The median seconds of one ``evaluate`` call at θ⁰ on the first 16-2,048 rows."""
    from flegel.api import DataInfo

    alg = resolve_algorithm(name)(**params)
    info = DataInfo(n_features=x.shape[1], n_points=len(x), n_workers=WORKERS,
                    sample=x[:2500])
    theta = alg.init_parameter(info)
    cells = []
    for m in (16, 64, 370, 2048):
        block = Block.from_arrays(np.ascontiguousarray(x[:m]))
        alg.evaluate(theta, block)  # the kernel's first call
        times = []
        for _ in range(50):
            t = time.perf_counter()
            alg.evaluate(theta, block)
            times.append(time.perf_counter() - t)
        cells.append(f"{m} rows {np.median(times) * 1e3:.3f} ms")
    print(f"    one evaluate call: {', '.join(cells)}")


def fidelity(rows: list[tuple[str, float, float, float]]) -> None:
    exact = np.array([r[1] for r in rows])
    for k, label in ((2, "gauge"), (3, "online")):
        m = np.array([r[k] for r in rows])
        varied = np.std(m) > 0 and np.std(exact) > 0
        corr = float(np.corrcoef(exact, m)[0, 1]) if varied else float("nan")
        sign = float(np.mean(np.sign(m) == np.sign(exact)))
        rel = float(np.median(np.abs(m - exact) / np.maximum(np.abs(exact), 1e-300)))
        print(f"    {label:6s} correlation {corr:6.3f}  sign right {sign:5.0%}  "
              f"median |error|/|exact| {rel:8.3g}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--algorithms", default="kmeans,gmm,fcm,nmf")
    ap.add_argument("--points", type=int, default=0, help="first N rows (0: all)")
    ap.add_argument("--iterations", type=int, default=40)
    ap.add_argument("--sample", type=int, default=2500,
                    help="rows of each shard in the master's sample (flegel.run: 10,000 / 4)")
    ap.add_argument("--gauge-points", type=int, default=256,
                    help="the gauge's subset (0: the budget's, the whole sample here)")
    ap.add_argument("--rows", action="store_true",
                    help="print every observation's exact, gauge and online progress")
    ap.add_argument("--cost", action="store_true",
                    help="time one evaluate call for 16-2,048 rows (a clock: load-dependent)")
    args = ap.parse_args(argv)
    for name in args.algorithms.split(","):
        x, params = workload(name, args.points)
        rows = run(name, x, params, args.iterations, args.sample, args.gauge_points)
        if args.rows:
            for k, (phase, exact, gauge, online) in enumerate(rows):
                print(f"    {k:3d} {phase:12s} exact {exact:12.6g}  gauge {gauge:12.6g}  "
                      f"online {online:12.6g}")
        if args.cost:
            call_cost(name, x, params)
        fidelity(rows)
        probes = [r for r in rows if r[0] != "run"]
        if probes:
            print(f"    probes only ({len(probes)}):")
            fidelity(probes)


if __name__ == "__main__":
    main()
