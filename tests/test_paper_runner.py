"""``flegel paper``'s runs (:class:`flegel.cli.paper.runner.Runner`): one mechanism runs a
setting here or across the local cluster (:func:`flegel.cli.paper.network.paper_run`), with
the same keys, target and failure handling; only the launcher differs.  No MPI: the
launchers here write the summary a run would (real runs are in tests/test_paper_mpi.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flegel.cli.compare import RunFailedError
from flegel.cli.paper import network
from flegel.cli.paper.runner import Runner
from flegel.cli.paper.workloads import QUICK


def _runner(tmp_path: Path) -> Runner:
    """A Runner whose K-means job and target exist (no reference run, no data written)."""
    runner = Runner(QUICK, tmp_path, say=lambda _: None)
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "kmeans-contiguous.yaml").write_text("")
    runner.targets["kmeans", "contiguous"] = 1.5
    return runner


def test_a_cluster_run_shares_the_runners_mechanism(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """paper_run passes the cluster the job, the preset's keys and the target, under the
    same timeout as a local run; its folder and key say "cluster", so it is shared with no
    local run, and a second call gets the same result."""
    calls: list[tuple[str, ...]] = []
    timeouts: list[float] = []

    class Up:
        def sh(self, *args: str, timeout: float = 600) -> None:
            calls.append(args)
            timeouts.append(timeout)
            out = Path(args[args.index("--out") + 1])
            out.mkdir(parents=True)
            (out / "summary.json").write_text(json.dumps({"time_to_target_s": 0.5,
                                                          "wall_time_s": 1.0}))

    monkeypatch.setattr(network, "find", lambda name=None: Up())
    runner = _runner(tmp_path)
    res = network.paper_run(runner, "kmeans", "contiguous", "fspv-async", "none")
    assert res.ok and res.target == 1.5 and res.folder.name.startswith(
        "kmeans-contiguous-fspv-async-cluster-")
    args = calls[0]
    assert args[:2] == ("run", str(tmp_path / "jobs" / "kmeans-contiguous.yaml"))
    assert "--force" in args and "stop.target_objective=1.5" in args
    assert timeouts == [3 * QUICK.ref_time_s + 60]
    assert network.paper_run(runner, "kmeans", "contiguous", "fspv-async", "none") is res
    assert len(calls) == 1

    local: list[Path] = []

    def here(job: Path, folder: Path, sets: list[str], timeout: float) -> dict[str, Any]:
        local.append(folder)
        return {"time_to_target_s": 0.7}

    mine = runner.run("kmeans", "contiguous", "fspv-async", "none", launch=here)
    assert local and mine is not res and "cluster" not in mine.folder.name


def test_a_cluster_run_fails_cleanly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No cluster up, or cluster.sh failing, gives a failed RunResult with the reason."""
    runner = _runner(tmp_path)
    monkeypatch.setattr(network, "find", lambda name=None: None)
    res = network.paper_run(runner, "kmeans", "contiguous", "fspv-async", "none")
    assert not res.ok and res.error == "no local cluster is up"

    class Broken:
        def sh(self, *args: str, timeout: float = 600) -> None:
            raise RuntimeError("cluster.sh run failed (1): boom")

    monkeypatch.setattr(network, "find", lambda name=None: Broken())
    res = network.paper_run(runner, "kmeans", "contiguous", "fspv-async", "none",
                            ("sync.eta_ms=8",))
    assert not res.ok and "boom" in (res.error or "")
    with pytest.raises(RunFailedError):
        network.on_cluster(tmp_path / "j.yaml", tmp_path / "o", [], 1.0)
