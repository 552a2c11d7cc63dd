"""The exact objective during training (flegel/runtime/exact.py), in one process: the
master's ExactObjective and the workers' Evaluators over an in-memory transport."""

from __future__ import annotations

import numpy as np
import pytest

from flegel.algorithms.kmeans import KMeans
from flegel.block import Block
from flegel.protocol import EvalEnd, EvalReply, EvalRequest
from flegel.runtime.exact import NEAR_BUDGET, Evaluator, ExactObjective, id_checksum
from flegel.runtime.store import ShardStore, global_ids


class Wire:
    """Master <-> workers messages, in order per direction and pair (as MPI's)."""

    def __init__(self, ranks: list[int]) -> None:
        self.to_worker: dict[int, list[EvalRequest | EvalEnd]] = {r: [] for r in ranks}
        self.to_master: list[tuple[int, EvalReply]] = []

    # the master's transport
    def send_eval(self, rank: int, message: EvalRequest | EvalEnd) -> None:
        self.to_worker[rank].append(message)

    def poll_evals(self) -> list[tuple[int, EvalReply]]:
        out, self.to_master = self.to_master, []
        return out


class Port:
    """A worker as its Evaluator sees it."""

    def __init__(self, rank: int, store: ShardStore, wire: Wire) -> None:
        self.rank, self.store, self.wire = rank, store, wire

    @property
    def shard(self) -> ShardStore:
        return self.store

    def eval_requests(self) -> list[EvalRequest | EvalEnd]:
        out, self.wire.to_worker[self.rank] = self.wire.to_worker[self.rank], []
        return out

    def reply_eval(self, message: EvalReply) -> None:
        self.wire.to_master.append((self.rank, message))


def setup(n: int = 10_000, workers: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4))
    algorithm = KMeans(n_clusters=3)
    theta = {"centers": x[:3].copy()}
    shards = np.array_split(x, workers)
    ranks = list(range(1, workers + 1))
    stores = {r: ShardStore(s, None, {}, ids=global_ids(r, len(s)))
              for r, s in zip(ranks, shards)}
    checksum = sum(id_checksum(st.ids) for st in stores.values()) % (1 << 64)
    wire = Wire(ranks)
    ports = {r: Port(r, stores[r], wire) for r in ranks}
    evaluators = {r: Evaluator(algorithm, chunk_rows=1000) for r in ranks}
    master = ExactObjective(ranks, n, checksum, budget=0.05)
    full = algorithm.evaluate(theta, Block(x, None, {}, np.zeros(n, dtype=bool)))
    return x, algorithm, theta, stores, wire, ports, evaluators, master, full


def run_until_done(master, wire, ports, evaluators, now=1.0, steps=100):
    for _ in range(steps):
        for r, ev in evaluators.items():
            ev.step(ports[r])
        done = master.collect(wire, now)
        if done is not None:
            return done
    raise AssertionError("the evaluation never completed")


def test_evaluation_is_the_objective_on_all_data_chunk_by_chunk():
    x, algorithm, theta, stores, wire, ports, evaluators, master, full = setup()
    master.request(wire, theta, version=7, now=0.5)
    assert not master.due(100.0, pass_s=0.0)  # one evaluation in flight at a time
    assert not master.due(0.6)  # one evaluation in flight at a time
    theta["centers"] += 1.0  # training goes on: the snapshot must not move
    ev = run_until_done(master, wire, ports, evaluators)
    assert ev.exact and ev.version == 7 and ev.time_s == 0.5
    assert ev.value == pytest.approx(full, rel=1e-12)
    # Chunks of 1,000 rows of 3,334 rows: the replies came after 4 steps, not in one.
    assert all(r.count == len(stores[k]) for k, r in ev.replies.items())
    assert master.trace()[0]["objective"] == ev.value and master.trace()[0]["exact"]


def test_budget_spaces_the_evaluations():
    _, _, theta, _, wire, ports, evaluators, master, _ = setup()
    # Before the first evaluation its cost is estimated from a pass at the training rate.
    assert not master.due(1.0, pass_s=None)
    assert not master.due(0.9, pass_s=0.05)  # 0.05 > 5% of 0.95
    assert master.due(0.95, pass_s=0.05)
    master.request(wire, theta, 0, now=0.0)
    ev = run_until_done(master, wire, ports, evaluators, now=2.0)
    c = ev.cost_s
    assert c == max(r.seconds for r in ev.replies.values()) > 0
    # Then the last cost is the estimate: two evaluations stay within 5% of the time.
    assert not master.due(2 * c / 0.05 - c - 1e-9) and master.due(2 * c / 0.05 - c + 1e-9)
    assert master.summary(train_s=10.0)["cost_fraction"] == pytest.approx(c / 10.0,
                                                                          abs=1e-4)


def test_points_in_flight_make_an_estimate_never_a_target_stop():
    x, algorithm, theta, stores, wire, ports, evaluators, master, full = setup()
    # A window of 50 points locked at worker 1 and not admitted anywhere yet.
    stores[1].lock(np.arange(50))
    master.request(wire, theta, 0, now=0.0)
    ev = run_until_done(master, wire, ports, evaluators)
    assert not ev.exact
    # The estimate scales the mean per point evaluated up to N.
    part = algorithm.evaluate(theta, Block(x[50:], None, {}, np.zeros(len(x) - 50, bool)))
    assert ev.value == pytest.approx(part * len(x) / (len(x) - 50))
    assert master.reached(target=ev.value * 2) is None


def test_a_point_counted_twice_is_caught_by_the_checksum_not_only_the_count():
    x, algorithm, theta, stores, wire, ports, evaluators, master, full = setup()
    # Worker 1 misses its row 0 while worker 2 holds a copy of worker 1's row 1 as well:
    # the count is right, the ids are not.
    stores[1].lock(np.array([0]))
    payload = stores[1].export(np.array([1]))
    stores[2].admit(payload)
    master.request(wire, theta, 0, now=0.0)
    ev = run_until_done(master, wire, ports, evaluators)
    assert sum(r.count for r in ev.replies.values()) == len(x)
    assert not ev.exact


def test_target_is_met_only_by_an_exact_value():
    _, _, theta, _, wire, ports, evaluators, master, full = setup()
    master.request(wire, theta, 3, now=0.0)
    ev = run_until_done(master, wire, ports, evaluators)
    assert master.reached(None) is None
    assert master.reached(full * 0.99) is None
    assert master.reached(full * 1.01) is ev
    # The snapshot is kept: it becomes the final θ of a target stop.
    assert set(ev.theta) == {"centers"}


def test_finish_leaves_no_request_unanswered():
    _, _, theta, _, wire, ports, evaluators, master, _ = setup()
    master.request(wire, theta, 0, now=0.0)
    # Training ends before any worker looked at the request.
    pauses = []

    def wait() -> None:
        pauses.append(1)
        for r, ev in evaluators.items():
            if not ev.ended or ev.queue or ev.current:
                ev.drain(ports[r], pause=lambda: None)

    master.finish(wire, wait)
    assert all(master.replied[r] == master.sent[r] == 1 for r in master.ranks)
    assert all(ev.ended for ev in evaluators.values())
    assert pauses


def test_budget_is_validated():
    with pytest.raises(ValueError, match="budget"):
        ExactObjective([1], 10, 0, budget=0.0)


class Timed:
    """Workers whose evaluation of θ ``{"t": t}`` takes ``cost_s`` and finds ``f(t)`` (every
    point once): the timeline of a run, without data."""

    def __init__(self, master: ExactObjective, f, cost_s: float) -> None:
        self.master, self.f, self.cost_s = master, f, cost_s
        self.now = 0.0
        self.owed: list[tuple[float, int, EvalReply]] = []

    def send_eval(self, rank: int, message: EvalRequest | EvalEnd) -> None:
        if isinstance(message, EvalRequest):
            value = self.f(float(message.theta["t"])) / len(self.master.ranks)
            count = self.master.n_points if rank == self.master.ranks[0] else 0
            checksum = self.master.checksum if count else 0
            self.owed.append((self.now + self.cost_s, rank,
                              EvalReply(message.id, [value], count, checksum, self.cost_s)))

    def poll_evals(self) -> list[tuple[int, EvalReply]]:
        out = [(r, m) for at, r, m in self.owed if at <= self.now]
        self.owed = [o for o in self.owed if o[0] > self.now]
        return out


def timeline(f, online, target: float, near: bool, cost_s: float = 0.02,
             step_s: float = 0.01, until_s: float = 4.0):
    """Drive the master's scheduling as the server does (``Server.exact_step``: collect,
    stop on an exact value at the target, else request when due), each barrier
    ``step_s`` apart; ``online(t)``: the online objective at t.  ``near``: the server says
    when the online objective reached the target (this branch), or never (main).
    Returns the time of the stop (None: none by ``until_s``) and the master."""
    master = ExactObjective([1, 2], 1000, 12345, budget=0.05)
    wire = Timed(master, f, cost_s)
    near_s = None
    for k in range(int(until_s / step_s) + 1):
        now = wire.now = k * step_s
        if master.collect(wire, now) is not None and master.reached(target) is not None:
            return now, master
        if near and near_s is None and online(now) <= target:
            near_s = now
        if master.due(now, pass_s=cost_s, near_s=near_s):
            master.request(wire, {"t": np.array(now)}, k, now)
    return None, master


def test_the_online_objective_reaching_the_target_asks_an_evaluation_at_once():
    # f falls to 1 and crosses the target 1.001 at t = 1.22, just after an evaluation on
    # the budget's schedule (0.38, 0.78, 1.18, ...); the online objective is f one barrier
    # late (K-means' full-batch barrier: the losses of the θ before it).
    def f(t: float) -> float:
        return 1.0 + 0.001 * np.exp(3.0 * (1.22 - t))

    target, crossing = 1.001, 1.22
    stop, master = timeline(f, lambda t: f(t - 0.01), target, near=True)
    assert stop is not None and crossing < stop <= crossing + 0.01 + 0.02 + 0.01
    assert master.latest is not None and master.latest.value <= target  # exact, at target
    # On the budget alone the evaluation after the crossing comes 20 costs after the last.
    late, before = timeline(f, lambda t: f(t - 0.01), target, near=False)
    assert late is not None and late - crossing > 0.35
    # Nothing is spent sooner: up to the crossing both ran the same evaluations.
    assert ([e.time_s for e in master.done if e.time_s < crossing]
            == [e.time_s for e in before.done if e.time_s < crossing])


def near_share_kept(master: ExactObjective, near_s: float) -> None:
    """Every evaluation after the one at the crossing kept, with those before it since,
    within NEAR_BUDGET of the time from that one's end."""
    since = [e for e in master.done if e.time_s >= near_s]
    assert since, "no evaluation at the crossing"
    start = since[0].done_s
    for k, e in enumerate(since[1:], start=1):
        assert k * e.cost_s <= NEAR_BUDGET * (e.time_s - start + e.cost_s) + 1e-9, (k, e)


def test_near_the_target_evaluations_take_a_larger_share_not_all_the_time():
    # An online objective below the target long before f reaches it (SGD's noisy exact
    # values): one evaluation at once, then evaluations within NEAR_BUDGET of the time.
    def f(t: float) -> float:
        return 2.0 - t / 2

    stop, master = timeline(f, lambda t: 0.5, target=0.5, near=True, cost_s=0.1)
    assert stop is not None
    assert master.done[0].time_s == 0.0  # the crossing's evaluation, whatever it costs
    near_share_kept(master, 0.0)
    assert sum(e.cost_s for e in master.done) <= NEAR_BUDGET * stop + 0.1


def test_a_late_crossing_does_not_spend_the_allowance_saved_before_it():
    """The online objective reaches the target at 3 s, the exact one never does: after the
    evaluation at the crossing the next waits for the larger share of the time since --
    counted from the start of the run, 0.2 x 3 s saved up would go to six evaluations back
    to back (review of ts)."""
    stop, master = timeline(lambda t: 2.0, lambda t: 0.5 if t >= 3.0 else 2.0, target=0.5,
                            near=True, cost_s=0.1, until_s=6.0)
    assert stop is None
    near_share_kept(master, 3.0)
    since = [e for e in master.done if e.time_s >= 3.0]
    assert since[0].time_s == 3.0 and len(since) >= 3
    assert since[1].time_s - since[0].done_s >= 0.1 * (1 / NEAR_BUDGET - 1) - 0.01
