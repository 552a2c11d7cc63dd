"""FSP data migration on the simulated clock (issue 11): the balancer's decisions without the
scheduling noise of a shared machine.

The real server, FSP master policy, balancer, worker policies, migrators and shard stores
run in one process on the simulated clock of ``tests/fakes.py`` (the real K-means kernel
computes; only time is simulated).  Four workers hold contiguous shards of data sorted by
cluster, so each holds different clusters.  Settings:

* ``injected``: worker 1 computes 60x slower (the injected straggler of the real benchmark,
  τ = 32 ms per 1,000 points against about 0.5 ms of compute, is of that order);
* ``noise``: every worker's speed changes every 50 ms to a random factor in [1, 2.5] (five
  ranks sharing two cores look like this);
* ``none``: equal speeds.

For each setting, FSPV without migration, with async and with sync migration run to a
target 0.05% above the converged objective (FSPV without stragglers run to a tight
tolerance).  The table shows time to target, the speedup over ``off``, per-worker passes at
the end and their spread relative to the mean (the issue's target: every worker within 10%
of the mean), the points held at the end and the points ordered to move.  Deterministic:
the same command prints the same figures.

Usage::

    python bench/migration_sim.py [--points 20000] [--settings injected,noise,none] [--json OUT]
    python bench/migration_sim.py --draws 8
    python bench/migration_sim.py --straggler
    python bench/migration_sim.py --recovery

``--json OUT`` also writes every row to OUT (for ``bench/suite.py``).  ``--draws N`` instead
runs the noise setting with N draws of the random speeds (draw k: worker r's factors seeded
r + 10k; draw 0 is the table's) and prints the time to target of off and async for each,
and their geometric mean ratio: one draw says little about random speeds.  ``--straggler``
instead runs ``tests/test_migration_fixed_cost.py``'s injected straggler (τ = 32 ms per 1,000
points, FSPV, 1 s) and prints max/min point passes at the end (Fig. 12's measure) and the
straggler's points, async against off.  ``--recovery`` runs a straggler that recovers:
worker 1 150x slower for the first second of 7.5 s (2 µs a point, 1 ms latency), async;
it prints every round's moves and the points ordered: a straggler's points should come back
in rounds that do not reverse.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fakes import Simulation, noisy_speed, overlapping  # noqa: E402

WORKERS, K, D = 4, 8, 8
COST_S = 1e-6  # simulated compute per point


def data(n: int, seed: int = 3) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Overlapping clusters sorted by cluster, and θ⁰ from random points."""
    return overlapping(n, seed, K, D)


def settings(draw: int = 0) -> dict[str, dict[int, Any]]:
    return {"injected": {1: 60.0},
            "noise": {r: noisy_speed(r + 10 * draw) for r in range(1, WORKERS + 1)},
            "none": {}}


def run(x: np.ndarray, theta0: dict[str, np.ndarray], mode: str, slowdown: dict[int, Any],
        stop: dict[str, Any]) -> dict[str, Any]:
    options = {"interval": "multistage", "migration": {"mode": mode}}
    sim = Simulation("fsp", options, workers=WORKERS, data=x, theta0=theta0, cost_s=COST_S,
                     slowdown=slowdown, jitter=0.1, stop=stop, max_sim_s=60).run()
    passes = np.array([sim.workers[r].store.passes for r in sim.ranks])
    mig = sim.policy.summary().get("migration", {})
    return {"mode": mode, "reason": sim.server.reason.value,
            "to_target": sim.server.time_to_target, "passes": passes,
            "spread": float(np.abs(passes - passes.mean()).max() / passes.mean()),
            "held": [sim.workers[r].store.n_held for r in sim.ranks],
            "ordered": mig.get("points_ordered", 0), "objective": sim.objective()}


def draws(x: np.ndarray, theta0: dict[str, np.ndarray], stop: dict[str, Any],
          n: int) -> list[float]:
    """Off against async under ``n`` draws of the noise; print them, return the ratios."""
    print(f"\n  noise, {n} draws: time to target (ms)")
    print(f"    {'draw':>4} {'off':>8} {'async':>8} {'vs off':>7} {'ordered':>8} "
          f"{'max dev off':>11} {'async':>6}")
    ratios = []
    for k in range(n):
        off, asyn = (run(x, theta0, mode, settings(k)["noise"], stop)
                     for mode in ("off", "async"))
        t_off, t_async = (r["to_target"] or stop["max_time_s"] for r in (off, asyn))
        ratios.append(t_off / t_async)
        print(f"    {k:4d} {t_off * 1e3:8.1f} {t_async * 1e3:8.1f} {ratios[-1]:6.2f}x "
              f"{asyn['ordered']:8d} {off['spread']:11.1%} {asyn['spread']:6.1%}")
    print(f"    geometric mean {np.exp(np.mean(np.log(ratios))):.2f}x, "
          f"lowest {min(ratios):.2f}x")
    return ratios


def straggler() -> None:
    """Print max/min passes of the injected straggler (Fig. 12's measure), off and async."""
    from tests.test_migration_fixed_cost import injected_straggler

    print("injected straggler (tests/test_migration_fixed_cost.py), 1 s simulated")
    print(f"    {'mode':6} {'max/min passes':>14} {'passes per worker':24} {'points held':28}")
    for mode in ("off", "async"):
        sim = injected_straggler(mode)
        passes = [sim.workers[r].store.passes for r in sim.ranks]
        held = " ".join(f"{sim.workers[r].store.n_active:6d}" for r in sim.ranks)
        print(f"    {mode:6} {max(passes) / min(passes):14.2f} "
              f"{' '.join(f'{p:5.1f}' for p in passes):24} {held:28}")


def recovery() -> None:
    """Print the rounds of a straggler that recovers (150x slower until 1 s) and the points
    ordered in all."""
    x, theta0 = data(20_000)
    sim = Simulation("fsp", {"interval": "multistage", "migration": {"mode": "async"}},
                     workers=WORKERS, data=x, theta0=theta0, cost_s=2e-6, jitter=0.1,
                     latency_s=1e-3, slowdown={1: lambda t: 150.0 if t < 1.0 else 1.0},
                     stop={"max_time_s": 7.5, "max_iterations": 10**7}, max_sim_s=20).run()
    balancer = sim.policy.balancer
    assert balancer is not None
    print("straggler recovering at 1 s (worker 1 150x slower before), 7.5 s simulated, async")
    for e in balancer.log:
        print(f"    {e['time_s']:5.2f} s  moves {e['moves']}  passes {e['passes']}")
    held = [sim.workers[r].store.n_active for r in sim.ranks]
    print(f"    ordered {balancer.ordered}, rounds {balancer.rounds}, final points {held}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--points", type=int, default=20_000)
    ap.add_argument("--settings", default="injected,noise,none")
    ap.add_argument("--json", type=Path, default=None, metavar="OUT",
                    help="also write every row to OUT (for bench/suite.py)")
    ap.add_argument("--draws", type=int, default=0, metavar="N",
                    help="only the noise setting, off against async, over N draws of the "
                         "random speeds")
    ap.add_argument("--straggler", action="store_true",
                    help="only the injected straggler of tests/test_migration_fixed_cost.py: "
                         "max/min point passes after 1 s, off and async")
    ap.add_argument("--recovery", action="store_true",
                    help="only a straggler that recovers at 1 s: its rounds and the points "
                         "ordered")
    args = ap.parse_args(argv)
    if args.recovery:
        recovery()
        return
    if args.straggler:
        straggler()
        return
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    x, theta0 = data(args.points)
    t0 = time.perf_counter()
    ref = run(x, theta0, "off", {}, {"max_iterations": 5000, "tolerance": 1e-9,
                                     "max_time_s": 5.0})
    target = ref["objective"] * 1.0005
    print(f"{args.points} points, {WORKERS} workers; target {target:.6g} "
          f"(converged objective + 0.05%)")
    stop = {"target_objective": target, "max_time_s": 5.0, "max_iterations": 1_000_000}
    if args.draws:
        draws(x, theta0, stop, args.draws)
        print(f"\n(simulated; {time.perf_counter() - t0:.0f} s of wall time)")
        return
    print("  max dev = largest |passes - mean| / mean at the end (target <= 10%)")
    for name in args.settings.split(","):
        slowdown = settings()[name]
        print(f"\n  {name}")
        print(f"    {'mode':6} {'to tgt ms':>9} {'vs off':>7} {'max dev':>8}  "
              f"{'passes per worker':24} {'points held':28} {'ordered':>8}")
        base = None
        for mode in ("off", "async", "sync"):
            r = run(x, theta0, mode, slowdown, stop)
            ttt = r["to_target"]
            base = ttt if mode == "off" else base
            rows.setdefault(name, {})[mode] = {
                "to_target_s": ttt, "speedup_vs_off": base / ttt if ttt and base else None,
                "max_dev": r["spread"], "passes": r["passes"].tolist(),
                "held": [int(h) for h in r["held"]], "ordered": int(r["ordered"])}
            speed = f"{base / ttt:6.2f}x" if ttt and base else "     -"
            shown = f"{ttt * 1e3:9.1f}" if ttt else f"{'>5000':>9}"
            passes = " ".join(f"{p:5.1f}" for p in r["passes"])
            held = " ".join(f"{h:6d}" for h in r["held"])
            print(f"    {mode:6} {shown} {speed:>7} {r['spread']:7.1%}  {passes:24} "
                  f"{held:28} {r['ordered']:8d}")
    print(f"\n(simulated; {time.perf_counter() - t0:.0f} s of wall time)")
    if args.json:
        args.json.write_text(json.dumps({"points": args.points, "target": target,
                                         "settings": rows}, indent=2))


if __name__ == "__main__":
    main()
