"""The exact objective after training (flegel/runtime/exact.py, issue 14): values found
during training are reused, every other θ is evaluated once, in one pass over each shard,
and the snapshots evaluated stay within ``output.trace_budget`` of the training time.

In one process: the master's :class:`FinalEvaluation` and the workers'
:func:`evaluate_snapshots` over in-memory shards, and the server of a simulated run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from flegel.algorithms.kmeans import KMeans
from flegel.block import Block
from flegel.job.validate import load_job
from flegel.runtime.exact import (
    CHUNK_ROWS,
    Evaluation,
    FinalEvaluation,
    evaluate_snapshots,
    fingerprint,
    id_checksum,
)
from flegel.runtime.store import ShardStore, global_ids
from tests.conftest import write_job
from tests.fakes import Simulation, kmeans_theta0

N, WORKERS = 9_000, 3


class Counting(KMeans):
    """K-means that counts, per θ, the evaluations and the points they covered."""

    def __init__(self) -> None:
        super().__init__(n_clusters=3)
        self.calls: dict[bytes, int] = {}
        self.points: dict[bytes, int] = {}
        self.blocks: list[int] = []  # id of each block evaluated, in order

    def evaluate(self, theta: dict[str, np.ndarray], block: Block) -> float:
        key = fingerprint(theta)
        self.calls[key] = self.calls.get(key, 0) + 1
        self.points[key] = self.points.get(key, 0) + len(block)
        self.blocks.append(id(block))
        return super().evaluate(theta, block)


def data(seed: int = 0) -> tuple[np.ndarray, dict[int, ShardStore], tuple[int, int]]:
    """Points, one store per worker (global ids), and (N, checksum of every id)."""
    x = np.random.default_rng(seed).normal(size=(N, 4))
    ranks = range(1, WORKERS + 1)
    stores = {r: ShardStore(s, None, {}, ids=global_ids(r, len(s)))
              for r, s in zip(ranks, np.array_split(x, WORKERS))}
    checksum = sum(id_checksum(st.ids) for st in stores.values()) % (1 << 64)
    return x, stores, (N, checksum)


def thetas(x: np.ndarray, n: int) -> list[dict[str, np.ndarray]]:
    """``n`` distinct θ, each nearer the data's centre than the one before."""
    return [{"centers": x[:3] * (1.0 - i / (n + 1))} for i in range(n)]


def f(algorithm: Any, theta: dict[str, np.ndarray], x: np.ndarray) -> float:
    return float(algorithm.evaluate(theta, Block(x, None, {}, np.zeros(len(x), bool))))


def during(theta: dict[str, np.ndarray], value: float, t: float, exact: bool = True
           ) -> Evaluation:
    """An evaluation made during training."""
    return Evaluation(id=0, version=0, time_s=t, theta=theta, value=value, exact=exact)


def finish(plan: FinalEvaluation, algorithm: Any, stores: dict[int, ShardStore]) -> None:
    """What run.py does: every worker evaluates ``plan.thetas``; the master adds them."""
    plan.complete([evaluate_snapshots(algorithm, st, plan.thetas) for st in stores.values()])


# ------------------------------------------------------------------ the workers' one pass

def test_one_pass_evaluates_every_theta_on_each_chunk_read_once() -> None:
    x, stores, _ = data()
    algorithm = Counting()
    ths = thetas(x, 5)
    reply = evaluate_snapshots(algorithm, stores[1], ths)
    n = len(stores[1])
    assert reply.count == n  # the points once, not once per θ
    assert reply.values == pytest.approx([f(KMeans(3), th, stores[1].x) for th in ths],
                                            rel=1e-12)
    chunks = -(-n // CHUNK_ROWS)
    assert all(algorithm.calls[fingerprint(th)] == chunks for th in ths)
    # The first chunk is one block for the 5 θs: read once.
    assert algorithm.blocks[:5] == [algorithm.blocks[0]] * 5
    assert evaluate_snapshots(algorithm, stores[1], []).count == 0


# ------------------------------------------------------------------ reuse, once each

def test_values_found_during_training_are_reused_and_the_rest_evaluated_once() -> None:
    x, stores, expected = data()
    algorithm = Counting()
    ths = thetas(x, 6)
    final = {"centers": ths[-1]["centers"].copy()}  # the last snapshot is the final θ
    times = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    # θ 1 and 3 were evaluated exactly during training; θ 2 only estimated (not reused); an
    # evaluation of a θ the trace did not keep joins the trace at its time.
    extra = {"centers": x[:3] * 0.05}
    ran = [during(ths[1], 111.0, 2.01), during(ths[2], 5.0, 3.01, exact=False),
           during(ths[3], 333.0, 4.01), during(extra, 222.0, 4.5)]
    # A copy of θ 0 (nothing changed between two snapshots) is evaluated once.
    times_all = times[:1] + [1.5] + times[1:]
    ths_all = ths[:1] + [{"centers": ths[0]["centers"].copy()}] + ths[1:]
    plan = FinalEvaluation(times_all, ths_all, final, train_s=7.0, during=ran, cost_s=1e-3,
                           budget=None, expected=expected)
    keys = [fingerprint(th) for th in plan.thetas]
    assert len(set(keys)) == len(keys)  # each θ once
    assert keys[0] == fingerprint(final)  # the final θ first ...
    # ... and θ 0, 2, 4 after it; θ 5 is the final θ; 1 and 3 are known.
    assert set(keys[1:]) == {fingerprint(ths[i]) for i in (0, 2, 4)}
    finish(plan, algorithm, stores)
    assert all(algorithm.points[k] == N for k in keys)  # every point, once per θ
    assert fingerprint(ths[1]) not in algorithm.calls
    assert plan.exact is True
    assert plan.final_objective == pytest.approx(f(KMeans(3), final, x), rel=1e-12)
    trace = dict(plan.trace())
    assert trace[2.0] == 111.0 and trace[4.0] == 333.0  # reused, at the snapshot's time
    assert trace[4.5] == 222.0  # an evaluation during training the trace lacked
    assert trace[1.0] == trace[1.5] == pytest.approx(f(KMeans(3), ths[0], x), rel=1e-12)
    assert trace[6.0] == trace[7.0] == plan.final_objective  # the final θ, at the end
    assert [t for t, _ in plan.trace()] == sorted(trace) and plan.trace()[-1][0] == 7.0
    s = plan.summary()
    assert (s["snapshots"], s["reused"], s["evaluated"], s["dropped"]) == (7, 3, 4, 0)
    assert not s["final_reused"] and s["cost_s"] > 0


def test_a_final_theta_evaluated_during_training_is_not_evaluated_again() -> None:
    # A target stop: the evaluated snapshot became the final θ (the server's own copy).
    x, stores, expected = data()
    algorithm = Counting()
    ths = thetas(x, 3)
    hit = during(ths[1], 42.0, 2.5)
    plan = FinalEvaluation([1.0, 2.0], ths[:2], hit.theta, train_s=3.0, during=[hit],
                           cost_s=1e-3, budget=0.1, expected=expected)
    assert [fingerprint(th) for th in plan.thetas] == [fingerprint(ths[0])]
    finish(plan, algorithm, stores)
    assert plan.final_objective == 42.0 and plan.summary()["final_reused"]
    assert plan.trace() == [(1.0, pytest.approx(f(KMeans(3), ths[0], x))), (2.0, 42.0),
                            (3.0, 42.0)]
    # Nothing left to evaluate: the workers read nothing.
    known = FinalEvaluation([2.0], ths[1:2], hit.theta, 3.0, [hit], 1e-3, 0.1)
    assert known.thetas == []
    known.complete([evaluate_snapshots(algorithm, st, []) for st in stores.values()])
    assert known.trace() == [(2.0, 42.0), (3.0, 42.0)] and known.summary()["cost_s"] is None
    # Training went on past the snapshot that met the target until the stop took effect:
    # the final θ (that snapshot) is not drawn again at the end, where it read as a rise.
    later = FinalEvaluation([1.0, 2.0, 2.8], ths, hit.theta, 3.0, [hit], 1e-3, None)
    later.complete([evaluate_snapshots(algorithm, st, later.thetas) for st in stores.values()])
    trace = later.trace()
    assert [t for t, _ in trace] == [1.0, 2.0, 2.8] and trace[1] == (2.0, 42.0)
    assert later.final_objective == 42.0


# ------------------------------------------------------------------ the budget

@pytest.mark.parametrize("budget, allowed", [(0.1, 4), (0.25, 10), (0.0, 0), (None, 30)])
def test_snapshots_evaluated_respect_the_budget_and_the_final_theta_always_is(
        budget: float | None, allowed: int) -> None:
    x, stores, expected = data()
    ths = thetas(x, 31)
    times = [float(i + 1) for i in range(30)]
    # One θ costs 1 s, training took 40 s: 10% allows 4 snapshots, 25% 10.
    plan = FinalEvaluation(times, ths[:30], ths[30], train_s=40.0, cost_s=1.0,
                           budget=budget, expected=expected)
    assert len(plan.thetas) == 1 + allowed
    assert fingerprint(plan.thetas[0]) == fingerprint(ths[30])
    s = plan.summary()
    assert s["evaluated"] == 1 + allowed and s["dropped"] == 30 - allowed
    assert s["estimated_s"] == pytest.approx(1.0 + allowed)
    finish(plan, KMeans(3), stores)
    trace = plan.trace()
    # The dropped snapshots are named, and only the evaluated ones are in the trace.
    assert sorted(s["dropped_s"] + [t for t, _ in trace[:-1]]) == times
    assert trace[-1] == (40.0, plan.final_objective)
    if 1 < allowed < 30:
        # Evenly spread: one in the middle of each of `allowed` equal stretches.
        gaps = np.diff([t for t, _ in trace[:-1]])
        assert gaps.max() - gaps.min() <= 1.0 + 1e-9


def test_with_a_target_half_the_budget_goes_where_the_target_is_crossed() -> None:
    x, stores, _ = data()
    ths = thetas(x, 41)
    times = [float(i + 1) for i in range(40)]
    # Known during training: above the target at 20.2 s, at or below it at 30.2 s.  The first
    # snapshot to meet it lies among those of 21..30 s.
    ran = [during(ths[40], 50.0, 20.2), during({"centers": x[:3] * 0.01}, 5.0, 30.2)]
    plan = FinalEvaluation(times, ths[:40], ths[0], train_s=40.0, during=ran, cost_s=1.0,
                           budget=0.15, target=10.0)
    chosen = sorted(t for t, th in zip(times, ths)
                    if any(fingerprint(th) == fingerprint(p) for p in plan.thetas[1:]))
    assert len(chosen) == 6
    inside = [t for t in chosen if 20.2 < t < 30.2]
    assert len(inside) == 3 and len(chosen) - len(inside) == 3


# ------------------------------------------------------------------ the server's plan

def test_a_simulated_run_plans_its_final_evaluation_within_the_budget() -> None:
    # Lloyd from 4 of the points of one Gaussian: θ changes at every iteration.
    x = np.random.default_rng(0).normal(size=(3000, 3))
    sim = Simulation("bsp", {"batch": "full"}, workers=3, data=x, theta0=kmeans_theta0(x[:4]),
                     trace_points=10, stop={"max_iterations": 40})
    sim.run()
    srv = sim.server
    assert len(srv.trace.times) >= 10
    every = srv.final_evaluation(None)
    assert len(every.thetas) == len({fingerprint(t) for t in srv.trace.thetas} |
                                    {fingerprint(srv.theta)})
    # One θ costs a pass at the training rate: a 10% budget of the run allows
    # 0.1 x 40 iterations = 4 snapshots (give or take the estimate), plus the final θ.
    capped = srv.final_evaluation(0.1)
    assert srv.pass_s() is not None and capped.cost_s == srv.pass_s()
    allowed = int(0.1 * srv.train_s / srv.pass_s())
    assert 1 <= allowed < len(srv.trace.times)
    assert len(capped.thetas) == 1 + allowed
    assert fingerprint(capped.thetas[0]) == fingerprint(srv.theta)
    stores = {r: w.store for r, w in sim.workers.items()}
    finish(capped, sim.algorithm, stores)
    assert capped.final_objective == pytest.approx(sim.objective(), rel=1e-9)
    # Every snapshot is in the trace or named as dropped; the final θ ends it.
    assert len(capped.trace()) - 1 + capped.summary()["dropped"] == len(srv.trace.times)
    assert capped.trace()[-1] == (srv.train_s, capped.final_objective)


# ------------------------------------------------------------------ the job's default

def test_the_budget_caps_a_drawing_trace_and_not_a_time_to_target_one(tmp_path: Path
                                                                       ) -> None:
    job = write_job(tmp_path / "job.yaml", algorithm="kmeans", params={"n_clusters": 2},
                    data={"source": "synthetic", "kind": "blobs", "n_points": 100,
                          "n_features": 2, "centers": 2, "seed": 0}, workers=2)
    assert load_job(job).output.trace_budget == 0.05  # runtime.exact_budget
    assert load_job(job, ["runtime.exact_budget=0.1"]).output.trace_budget == 0.1
    # With a target, every snapshot counts for time to target: no cap.
    assert load_job(job, ["stop.target_objective=1.0"]).output.trace_budget is None
    assert load_job(job, ["stop.target_objective=1.0", "output.trace_budget=0.2"]
                    ).output.trace_budget == 0.2
