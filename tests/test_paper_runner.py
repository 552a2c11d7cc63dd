"""``flegel paper``'s runs (:class:`flegel.cli.paper.runner.Runner`): one mechanism runs a
setting here or across the local cluster (:func:`flegel.cli.paper.network.paper_run`), with
the same keys, target and failure handling; only the launcher differs.  No MPI: the
launchers here write the summary a run would (real runs are in tests/test_paper_mpi.py)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from flegel.cli.compare import RunFailedError
from flegel.cli.paper import network
from flegel.cli.paper import runner as runner_module
from flegel.cli.paper.runner import (
    HORIZON_GRACE,
    REFERENCE_TRACE_BUDGET,
    REFERENCE_TRACE_FACTOR,
    Runner,
    stands_for_run_to_target,
    to_target,
)
from flegel.cli.paper.workloads import FULL, QUICK


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


def test_to_target_reads_a_run_without_a_target_as_one_to_it() -> None:
    """A reference's summary as a run to ``target`` for ``max_time_s``: the trace up to
    then, the first snapshot at or below the target as the runtime reports it (no
    interpolation), the training time capped (at the first reach where there is one: about
    where the run stops), the final objective the last value kept, the summary marked as
    read from the reference."""
    ref = {"objective_trace": [[0.1, 9.0], [0.3, 5.2], [0.5, 4.8], [0.9, 4.7], [5.0, 4.0]],
           "wall_time_s": 5.0, "final_objective": 4.0, "iterations": 30}
    s = to_target(ref, 5.0, 4.0)
    assert s["time_to_target_s"] == 0.5 and s["wall_time_s"] == 0.5
    assert s["read_from_reference"] is True and "read_from_reference" not in ref
    # The trace ends at the reach, where a run to the target stops; its final objective is
    # the value that met the target (the runtime's target stop).
    assert s["objective_trace"] == ref["objective_trace"][:3]
    assert s["final_objective"] == 4.8 and s["target_objective"] == 5.0
    assert s["iterations"] == 30 and ref["wall_time_s"] == 5.0  # a copy, the rest kept
    # Reached only after max_time_s: not reached (a run to the target stops at 4 s).
    late = to_target(ref, 4.5, 4.0)
    assert late["time_to_target_s"] is None and late["wall_time_s"] == 4.0
    # A reference that converged before max_time_s keeps its whole trace and time.
    short = {"objective_trace": [[0.1, 9.0], [0.2, 4.9]], "wall_time_s": 0.2,
             "final_objective": 4.9}
    assert to_target(short, 5.0, 4.0) == {**short, "target_objective": 5.0,
                                          "time_to_target_s": 0.2, "read_from_reference": True}


def test_to_target_of_a_reference_that_rose_after_the_reach() -> None:
    """A reference whose target is its best (it rose at its end, reference_objective): read
    to the target it stops at the reach -- no rise after it in its trace, and the final
    objective the value that met the target, not the reference's final."""
    ref = {"objective_trace": [[1.0, 4000.0], [3.0, 2506.0], [3.5, 5120.0]],
           "wall_time_s": 3.6, "final_objective": 5120.0}
    s = to_target(ref, 2631.3, 4.0)
    assert s["time_to_target_s"] == 3.0 and s["wall_time_s"] == 3.0
    assert s["objective_trace"] == ref["objective_trace"][:2]
    assert s["final_objective"] == 2506.0


def test_to_target_keeps_the_final_snapshot_a_few_ms_past_max_time_s() -> None:
    """A run stopped by ``max_time_s`` takes its final θ a few ms after it: the reference's
    snapshots within HORIZON_GRACE past it count, later ones do not."""
    ref = {"objective_trace": [[1.0, 9.0], [3.9, 8.0], [4.03, 7.0], [4.05, 6.0]],
           "wall_time_s": 5.0, "final_objective": 6.0}
    s = to_target(ref, 6.5, 4.0)
    assert 4.0 * (1 + HORIZON_GRACE) < 4.05
    assert s["objective_trace"] == ref["objective_trace"][:3] and s["final_objective"] == 7.0
    assert s["time_to_target_s"] is None and s["wall_time_s"] == 4.0


def _scripted(monkeypatch: pytest.MonkeyPatch, summary: dict[str, Any]
              ) -> tuple[list[list[str]], Any]:
    """``run_one`` replaced by a launcher that records each run's ``--set`` keys and returns
    a copy of ``summary`` (no MPI): the keys launched so far, and the launcher."""
    launched: list[list[str]] = []

    def launch(job: Path, folder: Path, sets: list[str], timeout: float) -> dict[str, Any]:
        launched.append(sets)
        return copy.deepcopy(summary)

    monkeypatch.setattr(runner_module, "run_one", launch)
    return launched, launch


def test_bspb_without_stragglers_is_read_from_the_reference(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runner.run of BSPB without stragglers (Fig. 8's BSPB column) launches nothing: it is
    the reference run -- which evaluates its whole trace -- read to its target.  With
    stragglers, other keys, or elsewhere, BSPB runs as any setting does."""
    ref = {"final_objective": 100.0, "wall_time_s": 0.4, "iterations": 3,
           "objective_trace": [[0.1, 130.0], [0.2, 100.05], [0.4, 100.0]],
           "final_evaluation": {"snapshots": 3, "dropped": 0},
           "exact_objective": {"evaluations": 1, "trace": [
               {"time_s": 0.2, "version": 2, "objective": 100.05, "exact": True,
                "cost_s": 0.01}]},
           "time_to_target_s": 0.3}
    launched, launch = _scripted(monkeypatch, ref)
    runner = Runner(QUICK, tmp_path, say=lambda _: None)
    monkeypatch.setattr(Runner, "job", lambda self, a, p: tmp_path / f"{a}-{p}.yaml")
    bspb = runner.run("kmeans", "strided", "bspb")
    (ref_sets,) = launched
    assert f"output.trace_budget={REFERENCE_TRACE_BUDGET:g}" in ref_sets
    assert f"output.trace_points={REFERENCE_TRACE_FACTOR * 40}" in ref_sets
    assert not any(x.startswith("stop.target_objective=") for x in ref_sets)
    ref = runner.reference("kmeans", "strided")
    assert ref is not None and bspb.folder == ref.folder and bspb.ok
    target = 100.0 + runner.work["kmeans"].slack * 100.0
    assert bspb.target == target and bspb.time.reached and bspb.time.s == 0.2
    assert (bspb.summary or {})["read_from_reference"] is True
    assert runner.run("kmeans", "strided", "bspb") is bspb and len(launched) == 1
    runner.run("kmeans", "strided", "bspb", "injected:tau=32,workers=1")
    runner.run("kmeans", "strided", "bspb", sets=("sync.batch=1000",))
    runner.run("kmeans", "strided", "bspb", where="cluster", launch=launch)
    assert len(launched) == 4
    assert all(f"stop.target_objective={target!r}" in s for s in launched[1:])


def test_bspb_from_a_failed_reference_fails(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(job: Path, folder: Path, sets: list[str], timeout: float) -> dict[str, Any]:
        raise RunFailedError("reference broke")

    monkeypatch.setattr(runner_module, "run_one", fail)
    runner = Runner(QUICK, tmp_path, say=lambda _: None)
    monkeypatch.setattr(Runner, "job", lambda self, a, p: tmp_path / f"{a}-{p}.yaml")
    res = runner.run("kmeans", "strided", "bspb")
    assert not res.ok and "reference broke" in (res.error or "") and not res.time.reached


def test_bspb_runs_where_the_target_was_given_without_a_reference(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A target set by hand (``bench/paper_pairs.py``: no reference run): BSPB without
    stragglers runs to it as any setting does."""
    launched, _ = _scripted(monkeypatch, {"time_to_target_s": 0.7, "wall_time_s": 0.8})
    runner = _runner(tmp_path)
    res = runner.run("kmeans", "contiguous", "bspb")
    assert res.ok and res.time.s == 0.7 and res.folder.name.startswith(
        "kmeans-contiguous-bspb-")
    (sets,) = launched
    assert "sync.model=bspb" in sets and "stop.target_objective=1.5" in sets


def test_a_reference_stands_for_a_run_to_the_target_only_where_its_trace_is_as_fine(
        ) -> None:
    """Every θ version kept (none thinned or dropped), and the first reach -- or the
    run's versions up to max_time_s where none -- within the 2 x trace_points versions a run
    to the target keeps every one of."""
    trace = [[0.01 * (i + 1), 100.0 - i] for i in range(30)]
    full = {"objective_trace": trace, "iterations": 30,
            "final_evaluation": {"snapshots": 30, "dropped": 0},
            # evaluated during training at the 6th version: a run to 95 stops there
            "exact_objective": {"evaluations": 1, "trace": [
                {"time_s": 0.06, "version": 6, "objective": 95.0, "exact": True,
                 "cost_s": 1e-3}]}}
    assert stands_for_run_to_target(full, 95.0, 4.0, 40)        # reached at its 6th
    assert not stands_for_run_to_target(full, 95.0, 4.0, 2)     # a run to it thins at 4
    assert stands_for_run_to_target(full, 95.0, 4.0, 3)
    # Thinned (fewer snapshots than versions) or a snapshot dropped: never.
    thinned = {**full, "iterations": 60}
    assert not stands_for_run_to_target(thinned, 95.0, 4.0, 40)
    dropped = {**full, "final_evaluation": {"snapshots": 30, "dropped": 1}}
    assert not stands_for_run_to_target(dropped, 95.0, 4.0, 40)
    # Not reached (or only after max_time_s): the versions up to max_time_s count.
    assert stands_for_run_to_target(full, 10.0, 4.0, 40)
    assert not stands_for_run_to_target(full, 10.0, 4.0, 10)
    assert stands_for_run_to_target(full, 75.0, 0.1, 10)         # 10 by 0.1 s, < 20
    # A summary that says nothing of its final evaluation or iterations: never.
    assert not stands_for_run_to_target(
        {k: v for k, v in full.items() if k != "final_evaluation"}, 95.0, 4.0, 40)
    assert not stands_for_run_to_target(
        {k: v for k, v in full.items() if k != "iterations"}, 95.0, 4.0, 40)


def test_a_reference_counts_the_versions_to_where_a_run_to_the_target_stops() -> None:
    """A run to the target stops at its first exact evaluation during training at or below
    it (sparse: 5 % of the time), not at the trace's first reach: the versions up to that
    evaluation count.  Here the trace reaches 95 at its 6th version, but the evaluations
    during training first see it at the 25th: a run to the target with trace_points=10
    holds 24 versions before it stops, thins past 20, and may lose the 6th."""
    trace = [[0.01 * (i + 1), 100.0 - i] for i in range(30)]
    evals = [{"time_s": 0.01, "version": 1, "objective": 100.0, "exact": True, "cost_s": 1e-3},
             {"time_s": 0.12, "version": 12, "objective": 89.0, "exact": False,
              "cost_s": 1e-3},
             {"time_s": 0.25, "version": 25, "objective": 76.0, "exact": True, "cost_s": 1e-3}]
    ref = {"objective_trace": trace, "iterations": 30,
           "final_evaluation": {"snapshots": 30, "dropped": 0},
           "exact_objective": {"evaluations": 3, "trace": evals}}
    assert not stands_for_run_to_target(ref, 95.0, 4.0, 10)    # 24 versions >= 20
    assert stands_for_run_to_target(ref, 95.0, 4.0, 13)        # 24 < 26
    # No exact evaluation at or below the target by max_time_s: the run lasts max_time_s.
    assert not stands_for_run_to_target(ref, 95.0, 0.2, 10)    # 20 versions by 0.2 s
    assert stands_for_run_to_target(ref, 95.0, 0.19, 10)       # 19


def test_full_references_are_not_evaluated_to_stand_for_bspb(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--full``'s references (600 s at 20x the data) thin their traces anyway: they keep
    the workload's trace and budget (``Mode.fine_references``), where ``--quick``'s evaluate
    every snapshot."""
    launched, _ = _scripted(monkeypatch, {"final_objective": 100.0, "wall_time_s": 600.0})
    monkeypatch.setattr(Runner, "job", lambda self, a, p: tmp_path / f"{a}-{p}.yaml")
    assert Runner(FULL, tmp_path, say=lambda _: None).target("kmeans", "strided") is not None
    assert QUICK.fine_references and not FULL.fine_references
    (sets,) = launched
    assert not any(x.startswith(("output.trace_budget=", "output.trace_points="))
                   for x in sets)
    assert f"stop.max_time_s={FULL.ref_time_s}" in sets


def test_bspb_runs_where_the_reference_thinned_its_trace(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reference that ran far past the target thinned the versions around it (NMF on the
    quick page: 395 iterations): BSPB without stragglers runs to the target itself."""
    ref = {"final_objective": 100.0, "wall_time_s": 4.0, "iterations": 400,
           "objective_trace": [[0.5, 130.0], [1.0, 100.05], [4.0, 100.0]],
           "final_evaluation": {"snapshots": 3, "dropped": 0},
           "time_to_target_s": 0.6}
    launched, _ = _scripted(monkeypatch, ref)
    runner = Runner(QUICK, tmp_path, say=lambda _: None)
    monkeypatch.setattr(Runner, "job", lambda self, a, p: tmp_path / f"{a}-{p}.yaml")
    bspb = runner.run("nmf", "strided", "bspb")
    assert len(launched) == 2 and bspb.time.s == 0.6
    assert bspb.folder.name.startswith("nmf-strided-bspb-")


def test_a_reference_that_rose_at_its_end_sets_the_target_from_its_best() -> None:
    """The CNN's reference on contiguous shards fell to 2,506 and rose to 5,120 in its last
    two iterations: a target from the final value lay above θ⁽⁰⁾'s objective (4,609), and
    every run reached it at its first snapshot.  Where the trace never rose, its final."""
    from flegel.cli.paper.runner import reference_objective

    rose = {"final_objective": 5120.16,
            "objective_trace": [[0.25, 4608.9], [4.46, 2506.4], [4.76, 2622.8], [4.98, 5120.16]]}
    assert reference_objective(rose) == 2506.4
    fell = {"final_objective": 23311.6, "objective_trace": [[0.1, 40204.0], [4.0, 23311.6]]}
    assert reference_objective(fell) == 23311.6
    nan = {"final_objective": 3.0, "objective_trace": [[1.0, float("nan")]]}
    assert reference_objective(nan) == 3.0
    assert reference_objective({"final_objective": 3.0}) == 3.0


def test_a_second_paper_on_the_same_folder_rereads_its_finished_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``flegel paper --out DIR`` again: a setting whose run finished in DIR (its
    ``summary.json``, as ``flegel run`` writes it) is re-read, not launched -- the same
    summary, the reference's and the run's.  A run to another target is launched."""
    launched: list[list[str]] = []
    ref = {"final_objective": 100.0, "wall_time_s": 0.4, "iterations": 3,
           "objective_trace": [[0.1, 130.0], [0.4, 100.0]]}

    def launch(job: Path, folder: Path, sets: list[str], timeout: float) -> dict[str, Any]:
        launched.append(sets)
        target = next((float(x.split("=", 1)[1]) for x in sets
                       if x.startswith("stop.target_objective=")), None)
        out = {**ref, **({} if target is None else {"target_objective": target,
                                                    "time_to_target_s": 0.3})}
        folder.mkdir(parents=True)
        (folder / "summary.json").write_text(json.dumps(out))
        return out

    monkeypatch.setattr(runner_module, "run_one", launch)
    monkeypatch.setattr(Runner, "job", lambda self, a, p: tmp_path / f"{a}-{p}.yaml")
    inj = "injected:tau=32,workers=1"
    first = Runner(QUICK, tmp_path, say=lambda _: None)
    run = first.run("kmeans", "contiguous", "bspv", inj)
    assert len(launched) == 2 and run.ok and run.time.s == 0.3  # the reference, the run
    said: list[str] = []
    again = Runner(QUICK, tmp_path, say=said.append)
    same = again.run("kmeans", "contiguous", "bspv", inj)
    assert len(launched) == 2 and same.summary == run.summary and same.folder == run.folder
    assert said[-1] == f"  kmeans/contiguous/bspv/{inj}: re-read {run.folder.name}"
    assert again.target("kmeans", "contiguous") == first.target("kmeans", "contiguous")
    # Another target (set by hand): the run in the folder is not to it, so it is launched
    # (and, as ``flegel run`` refuses an existing run folder, fails: not a wrong run).
    other = Runner(QUICK, tmp_path, say=lambda _: None)
    other.targets["kmeans", "contiguous"] = 150.0
    res = other.run("kmeans", "contiguous", "bspv", inj)
    assert len(launched) == 3 and not res.ok and "exists" in (res.error or "")


def test_a_run_made_by_other_code_is_launched_afresh_not_reread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``flegel paper --out DIR`` after a change of flegel's code: the runs DIR holds were made
    by the old code, so each setting runs again, in a folder of its own beside the old one,
    and the page judges the new code's runs.  A change of a judging module only
    (``PAGE_ONLY``) re-reads them."""
    launched: list[Path] = []
    ref = {"final_objective": 100.0, "wall_time_s": 0.4, "iterations": 3,
           "objective_trace": [[0.1, 130.0], [0.4, 100.0]]}

    def launch(job: Path, folder: Path, sets: list[str], timeout: float) -> dict[str, Any]:
        launched.append(folder)
        folder.mkdir(parents=True)
        (folder / "summary.json").write_text(json.dumps(ref))
        return ref

    monkeypatch.setattr(runner_module, "run_one", launch)
    monkeypatch.setattr(Runner, "job", lambda self, a, p: tmp_path / f"{a}-{p}.yaml")
    monkeypatch.setattr(runner_module, "code_digest", lambda: "old code")
    old = Runner(QUICK, tmp_path, say=lambda _: None).trace_run(
        "kmeans", "strided", "fspv", "none", ("stop.max_time_s=1",))
    monkeypatch.setattr(runner_module, "code_digest", lambda: "new code")
    new = Runner(QUICK, tmp_path, say=lambda _: None).trace_run(
        "kmeans", "strided", "fspv", "none", ("stop.max_time_s=1",))
    assert launched == [old.folder, new.folder] and old.folder != new.folder
    assert new.ok and old.folder.exists()


def test_the_code_digest_reads_the_installed_code_and_skips_the_judging_modules(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The digest changes with a runtime module's bytes, not with a judging module's."""
    import flegel

    fake = tmp_path / "flegel"
    (fake / "cli" / "paper").mkdir(parents=True)
    (fake / "run.py").write_text("a = 1\n")
    (fake / "cli" / "paper" / "common.py").write_text("LEVEL = 1.05\n")
    monkeypatch.setattr(flegel, "__path__", [str(fake)])
    digest = runner_module.code_digest.__wrapped__
    first = digest()
    (fake / "cli" / "paper" / "common.py").write_text("LEVEL = 1.10\n")
    assert digest() == first
    (fake / "run.py").write_text("a = 2\n")
    assert digest() != first
    assert runner_module.code_digest() == runner_module.code_digest()
