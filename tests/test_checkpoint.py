"""Checkpoints in-process: the state protocol of each part, the quiescent point under every
sync model (on the simulated clock), the files on disk and the errors of a bad checkpoint.

The end-to-end resume under real mpirun is tests/test_checkpoint_mpi.py.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from flegel.block import Block
from flegel.cli.resume import resumed_job
from flegel.job.errors import JobError
from flegel.job.validate import validate
from flegel.rundir import checkpoint
from flegel.rundir.checkpoint import Checkpointer, CheckpointError, Schedule
from flegel.runtime.stopping import StopCriteria
from flegel.runtime.store import ShardStore
from flegel.runtime.stragglers import Stragglers
from flegel.state import AttributeState
from tests.fakes import Simulation


def _pickled(state: dict[str, Any]) -> dict[str, Any]:
    """What a checkpoint file gives back."""
    return pickle.loads(pickle.dumps(state))


# ----------------------------------------------------------------------------- the protocol
class _Inner(AttributeState):
    def __init__(self) -> None:
        self.count = 0


class _Outer(AttributeState):
    NOT_STATE = ("owner",)
    NESTED = ("inner",)

    def __init__(self, owner: object) -> None:
        self.owner = owner
        self.inner = _Inner()
        self.log: list[int] = []


def test_attribute_state_skips_references_and_restores_nested_parts():
    a = _Outer(owner=object())
    a.inner.count, a.log = 3, [1, 2]
    state = _pickled(a.checkpoint_state())
    assert "owner" not in state
    a.log.append(9)  # a snapshot is a copy: later changes do not reach it
    b = _Outer(owner="mine")
    inner = b.inner
    b.restore(state)
    assert (b.owner, b.inner is inner, b.inner.count, b.log) == ("mine", True, 3, [1, 2])


def _store(n: int = 40, rank: int = 1) -> ShardStore:
    x = np.arange(n * 2, dtype=float).reshape(n, 2) + 100 * rank
    ids = (np.int64(rank) << 40) | np.arange(n, dtype=np.int64)
    return ShardStore(x, None, {"s": np.zeros(n)}, ids=ids)


def _train(store: ShardStore, blocks: int, size: int = 7) -> list[np.ndarray]:
    """Process ``blocks`` blocks (each point's state counts its visits); the ids trained."""
    seen = []
    for _ in range(blocks):
        block, sel = store.next_block(size)
        block.state["s"] += 1
        store.commit_block(Block(block.x, block.y, block.state, block.halt), sel)
        seen.append(store.ids[sel].copy())
    return seen


def test_store_continues_exactly_with_migrated_rows_and_a_mark():
    a, other = _store(), _store(rank=2)
    _train(a, 3)
    a.lock(a.select_behind_cursor(5))           # a window sent away
    a.admit(other.export(np.arange(4)))         # points of worker 2 arrived
    a.mark()                                    # an FSPV probe is under way
    _train(a, 2)
    state = _pickled(a.checkpoint_state())
    b = _store()                                # a resumed worker loads its shard again
    b.restore(state)
    assert np.array_equal(a.x, b.x) and np.array_equal(a.ids, b.ids)
    assert (a.cursor, a.cycles, a.n_held, a.n_active, a.n_queued) == \
        (b.cursor, b.cycles, b.n_held, b.n_active, b.n_queued)
    a.rollback()
    b.rollback()  # the mark's journal came along
    for x, y in zip(_train(a, 12), _train(b, 12)):
        assert np.array_equal(x, y)
    assert np.array_equal(a.state["s"], b.state["s"])
    assert np.array_equal(a.visits, b.visits)


def test_store_refuses_another_shard():
    state = _store(40).checkpoint_state()
    with pytest.raises(ValueError, match="expected a shard of 40 rows, found 30"):
        _store(30).restore(state)


def test_stragglers_continue_their_random_sequence():
    spec = [{"pattern": "transient", "workers": [1], "factor": 3.0, "on_s": 0.5, "off_s": 0.5}]
    a = Stragglers.for_rank(spec, 1, seed=5)
    a.patterns[0].rng.random(7)
    b = Stragglers.for_rank(spec, 1, seed=5)
    b.restore(_pickled(a.checkpoint_state()))
    assert np.array_equal(a.patterns[0].rng.random(5), b.patterns[0].rng.random(5))


def test_stop_criteria_keep_their_progress_not_their_limits():
    a = StopCriteria(max_iterations=5, tolerance=1e-3)
    a.check(1, 10.0, 1.0, 0.1, {1: (100.0, 100.0)})
    b = StopCriteria(max_iterations=50, tolerance=1e-3)  # a resumed job may raise it
    b.restore(_pickled(a.checkpoint_state()))
    assert (b.checks, b.max_iterations) == (1, 50)
    assert b.check(2, 10.0, 2.0, 0.2, {1: (200.0, 100.0)}) == "converged"


def test_fsp_policy_and_adjustor_state():
    sim = Simulation("fsp", {"interval": "binary"}, workers=2, stop={"max_iterations": 8}).run()
    state = _pickled(sim.policy.checkpoint_state())
    assert "server" not in state and "options" not in state
    fresh = Simulation("fsp", {"interval": "binary"}, workers=2)
    fresh.policy.restore(state)
    adj, old = fresh.policy.adjustor, sim.policy.adjustor
    assert (adj.state, adj.eta_s, adj.history) == (old.state, old.eta_s, old.history)
    assert fresh.policy.eta_log == sim.policy.eta_log


# ----------------------------------------------------------------------------- quiescence
class _Checkpointed(Simulation):
    """The simulation with checkpoints: the master loop's turn (:meth:`Server.poll_once`)
    takes them; a worker asked for its state answers with its store as it is when asked (it
    waits for these instructions: it is what it will be on receiving them)."""

    def __init__(self, run_dir: Path, every: dict[str, Any], *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.answers: list[tuple[int, Any]] = []
        self.quiet_at_take: list[bool] = []
        send = self.transport.send_params

        def answering(rank: int, fields: dict[str, float], theta: dict | None) -> None:
            if fields.get("checkpoint"):
                self.answers.append((rank, {"store": self.workers[rank].store
                                            .checkpoint_state()}))
            send(rank, fields, theta)

        self.transport.send_params = answering  # type: ignore[method-assign]
        self.server.checkpoint = Checkpointer(run_dir, every, self.ranks, self._states)
        take = self.server.checkpoint.take

        def recorded(master: dict[str, Any], now: float, version: int,
                     expect: list[int]) -> None:
            self.quiet_at_take.append(all(w.waiting for w in self.server.workers.values()))
            take(master, now, version, expect)

        self.server.checkpoint.take = recorded  # type: ignore[method-assign]

    def _states(self) -> list[tuple[int, Any]]:
        out, self.answers = self.answers, []
        return out



@pytest.mark.parametrize("model", ["bsp", "fsp", "elastic", "asp", "ssp", "dssp", "specsync"])
def test_every_model_reaches_quiescent_points_and_finishes(tmp_path, model):
    sim = _Checkpointed(tmp_path, {"every_iterations": 4}, model, workers=3,
                        cost_s=[10e-6, 10e-6, 30e-6], stop={"max_iterations": 24})
    sim.run()  # strict: a hold that never ends would hit the simulation's cap
    cp = sim.server.checkpoint
    cp.wait()
    assert cp.written >= 2, f"{model}: {cp.written} checkpoints"
    assert sim.quiet_at_take and all(sim.quiet_at_take)
    done = checkpoint.load(tmp_path, 3)
    assert set(done.workers) == {1, 2, 3}
    assert done.master["iteration"] == done.manifest["iteration"] <= sim.server.version
    # Every held reply was sent: nothing is lost to the hold.
    assert done.master["held"], "the snapshot holds the replies it delayed"
    assert len(list((tmp_path / "checkpoint").iterdir())) == 2  # one folder + manifest


# ----------------------------------------------------------------------------- on disk
def _written(tmp_path: Path, workers: int = 2) -> Path:
    states = [(r, {"rank": r}) for r in range(1, workers + 1)]
    cp = Checkpointer(tmp_path, {"every_iterations": 1}, list(range(1, workers + 1)),
                      lambda: states)
    for version in (1, 2):
        cp.take({"server": {"theta": {"w": np.ones(3) * version}}}, 0.5, version,
                list(range(1, workers + 1)))
        cp.collect()
    cp.wait()
    return tmp_path / "checkpoint" / "manifest.json"


def test_checkpoint_round_trip_keeps_only_the_latest(tmp_path):
    manifest = _written(tmp_path)
    back = checkpoint.load(tmp_path, 2)
    assert back.manifest["iteration"] == 2 and back.manifest["sequence"] == 2
    assert np.array_equal(back.master["server"]["theta"]["w"], np.full(3, 2.0))
    assert back.workers == {1: {"rank": 1}, 2: {"rank": 2}}
    assert sorted(p.name for p in manifest.parent.iterdir()) == ["000002", "manifest.json"]


def test_no_checkpoint_is_named(tmp_path):
    with pytest.raises(CheckpointError, match=r"checkpoint/manifest.json: expected a "
                       r"checkpoint to resume from, found none \(the job writes"):
        checkpoint.load(tmp_path)


@pytest.mark.parametrize("text, found", [
    ("{not json", "found a corrupt file"),
    ('{"format": 1}', "found none of folder, iteration"),
    ('{"format": 9, "folder": "x", "iteration": 1, "workers": 2, "files": {}, '
     '"sequence": 1}', "expected checkpoint format 1, found 9"),
])
def test_corrupt_manifest(tmp_path, text, found):
    _written(tmp_path).write_text(text)
    with pytest.raises(CheckpointError, match="manifest.json: expected") as err:
        checkpoint.load(tmp_path, 2)
    assert found in str(err.value)


def test_corrupt_file_and_other_worker_count(tmp_path):
    manifest = _written(tmp_path)
    with pytest.raises(CheckpointError, match="written by 2 workers, the resumed job has 3; "
                       "resume with the same number of workers"):
        checkpoint.load(tmp_path, 3)
    (manifest.parent / "000002" / "worker-2.pkl").write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match=r"worker-2.pkl: expected SHA-256 .* found .*"
                       "the checkpoint is corrupt"):
        checkpoint.load(tmp_path, 2)
    data = json.loads(manifest.read_text())
    (manifest.parent / "000002" / "worker-2.pkl").unlink()
    manifest.write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match="worker-2.pkl: expected the checkpoint file"):
        checkpoint.load(tmp_path, 2)


def test_schedule_holds_from_the_version_before_it_is_due():
    s = Schedule(every_iterations=3)
    assert [s.due(0.0, v) for v in range(4)] == [False, False, True, True]
    t = Schedule(every_s=2.0, last_s=1.0)
    assert (t.due(2.9, 0), t.due(3.0, 0)) == (False, True)


# ----------------------------------------------------------------------------- the job keys
def _job(tmp_path: Path, **output: Any) -> dict[str, Any]:
    return {"algorithm": "kmeans", "params": {"n_clusters": 2},
            "data": {"source": "synthetic", "kind": "blobs", "n_points": 100,
                     "n_features": 2, "centers": 2},
            "workers": 2, "output": output}


def test_checkpoint_keys(tmp_path):
    job = validate(_job(tmp_path, checkpoint={"every_s": 30}), tmp_path / "job.yaml")
    assert job.output.checkpoint == {"every_s": 30, "every_iterations": None}
    assert validate(_job(tmp_path), tmp_path / "job.yaml").output.checkpoint is None
    with pytest.raises(JobError, match="output.checkpoint.every_s.*exactly one of every_s "
                       "and every_iterations .found every_s and every_iterations"):
        validate(_job(tmp_path, checkpoint={"every_s": 3, "every_iterations": 2}),
                 tmp_path / "job.yaml")
    with pytest.raises(JobError, match="output.checkpoint.every"):
        validate(_job(tmp_path, checkpoint={"every": 3}), tmp_path / "job.yaml")


def test_resume_refuses_to_change_what_the_job_computes(tmp_path):
    _written(tmp_path)
    (tmp_path / "job.yaml").write_text(json.dumps(_job(tmp_path)))
    job = resumed_job(tmp_path, ["stop.max_iterations=9"])
    assert job.stop.max_iterations == 9
    with pytest.raises(CheckpointError, match="--set params.n_clusters=3: expected a key "
                       "under stop."):
        resumed_job(tmp_path, ["params.n_clusters=3"])
    with pytest.raises(CheckpointError, match="expected a run directory with job.yaml"):
        resumed_job(tmp_path / "nowhere", [])


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_fsp_migration_checkpoints_hold_every_point_once(tmp_path, mode):
    # A straggler gives points away (and gets some back, virtual migration): at every
    # snapshot no point is in flight, so the ids the workers hold cover the data once.
    sim = _Checkpointed(tmp_path, {"every_iterations": 3}, "fsp",
                        {"interval": "fixed", "eta_ms": 2, "migration": {"mode": mode}},
                        workers=3, points=3000, cost_s=[10e-6, 10e-6, 80e-6],
                        stop={"max_iterations": 60})
    seen: list[np.ndarray] = []
    write = sim.server.checkpoint._write

    def check() -> None:
        stores = sim.server.checkpoint._workers.values()
        held = np.concatenate([s["store"]["ids"][~s["store"]["inactive"]] for s in stores])
        seen.append(held)
        write()

    sim.server.checkpoint._write = check  # type: ignore[method-assign]
    sim.run()
    sim.server.checkpoint.wait()
    assert sim.policy.summary()["migration"]["points_ordered"] > 0
    assert len(seen) >= 5
    for held in seen:
        assert len(held) == 3000 and len(np.unique(held)) == 3000
    moved_in = [s["store"]["x_admitted"] for s in checkpoint.load(tmp_path, 3).workers.values()]
    assert sum(len(x) for x in moved_in) > 0  # migrated rows travel with the checkpoint


def test_a_checkpoint_that_cannot_be_written_warns_and_training_goes_on(tmp_path, capsys):
    (tmp_path / "checkpoint").write_text("a file where the folder goes")
    cp = Checkpointer(tmp_path, {"every_iterations": 1}, [1], lambda: [(1, {})])
    cp.take({"server": {}}, 0.1, 1, [1])
    cp.collect()
    cp.wait()
    assert cp.written == 0 and not cp.pending
    err = capsys.readouterr().err
    assert err.startswith(f"flegel: warning: checkpoint 1 not written in {tmp_path}/checkpoint: ")
    assert err.rstrip().endswith("the previous one is kept")
