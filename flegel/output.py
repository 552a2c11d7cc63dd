"""The run directory (DESIGN §6): resolved job, event log, model, summary."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from flegel.peak_memory import peak_rss_mib

CONVERGED = ("converged", "target", "algorithm", "halted")


def default_run_dir(job: Any) -> Path:
    """``output.dir/<name or algorithm>-<sync>-<timestamp>``."""
    name = job["name"] or job["algorithm"].split(":")[-1].split(".")[-1].lower()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = Path(job["output"]["dir"]).expanduser()
    if not base.is_absolute():
        base = Path.cwd() / base
    path = base / f"{name}-{job['sync']['model']}-{stamp}"
    i = 1
    while path.exists():
        i += 1
        path = base / f"{name}-{job['sync']['model']}-{stamp}-{i}"
    return path


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write JSON through a temporary file and a rename, so readers never see half a file."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=_jsonable) + "\n")
    os.replace(tmp, path)


def _jsonable(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, Path):
        return str(v)
    raise TypeError(f"cannot write {type(v).__name__} as JSON")


class RunWriter:
    """Writes one run's directory from the master.

    Files: ``job.yaml`` (the resolved job), ``events.jsonl`` (one JSON object per barrier or
    push), ``model.npz`` + ``model.json`` (arrays and metadata, no pickle), ``summary.json``.
    """

    def __init__(self, out_dir: Path, job: Any) -> None:
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.job = job
        doc = dict(job.doc)
        (self.dir / "job.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
        self._events = open(self.dir / "events.jsonl", "w", buffering=1 << 16)  # noqa: SIM115
        self._flushed = time.monotonic()

    def event(self, record: dict[str, Any]) -> None:
        """Append one event; flushed about once a second so a crash loses little."""
        self._events.write(json.dumps(record, default=_jsonable) + "\n")
        now = time.monotonic()
        if now - self._flushed > 1.0:
            self._events.flush()
            self._flushed = now

    def _test_metrics(self, algorithm: Any, theta: dict) -> dict[str, float]:
        """Evaluate the final θ on the held-out ``test_data`` (loaded whole, on the master)."""
        from flegel.block import Block
        from flegel.data import load_shard

        x, y = load_shard(self.job["test_data"], 0, 1, self.job.base_dir, key="test_data")
        block = Block.from_arrays(x, y, algorithm.init_state(len(x), x.shape[1]))
        return {"n_points": len(x), **algorithm.test_metrics(theta, block)}

    def save_model(self, algorithm: Any, theta: dict, version: int,
                   **meta: Any) -> bool:
        """Write ``model.npz`` and ``model.json`` for θ ``version`` (``meta`` goes into the
        JSON); the arrays are written once per version.  False when ``output.save_model``
        is off.  The master saves the model before the final evaluation and whenever a job
        ends early, so a failure there leaves the last good θ (issue 13)."""
        if not self.job["output"]["save_model"]:
            return False
        arrays: dict[str, np.ndarray] = {
            k: np.asarray(v) for k, v in algorithm.finalize(theta).items()}
        if getattr(self, "_saved_version", None) != version:
            # numpy's stub types **kwds against allow_pickle (bool) too
            np.savez(self.dir / "model.npz", **arrays)  # type: ignore[arg-type]
            self._saved_version = version
        write_json_atomic(self.dir / "model.json", {
            "algorithm": self.job["algorithm"], "params": self.job["params"],
            "arrays": {k: {"shape": list(a.shape), "dtype": a.dtype.str}
                       for k, a in arrays.items()},
            "theta_version": version, **meta})
        return True

    def finish(self, server: Any, policy: Any, algorithm: Any, info: Any,
               results: list[dict], infos: dict[int, dict]) -> dict[str, Any]:
        """Write model and summary; return the summary."""
        self._events.close()
        job = self.job
        final = float(sum(r["objective"] for r in results))
        summary: dict[str, Any] = {
            "algorithm": job["algorithm"],
            "objective_name": algorithm.objective_name,
            "sync": job["sync"],
            "workers": len(results),
            "n_points": info.n_points,
            "n_features": info.n_features,
            "iterations": server.version,
            "final_objective": final,
            "online_objective": server.objective,
            "wall_time_s": server.train_s,
            "converged": server.reason in CONVERGED,
            "stop_reason": server.reason,
            "load_s": max(i["load_s"] for i in infos.values()),
            "master_cpu_fraction": server.cpu_fraction,
            "master_idle_fraction": server.idle_fraction,
            "master_idle_cpu_fraction": server.idle_cpu_fraction,
            "master_peak_rss_mib": peak_rss_mib(),
        }
        trace = [(t, float(sum(r["trace"][i] for r in results)))
                 for i, t in enumerate(server.trace.times)] + [(server.train_s, final)]
        summary["objective_trace"] = [[round(t, 6), f] for t, f in trace]
        target = job["stop"]["target_objective"]
        if target is not None:
            summary["target_objective"] = target
            # Time to target on the exact objective of the θ snapshots (comparable across
            # sync models); the online objective's time is kept beside it.
            summary["time_to_target_s"] = next((t for t, f in trace if f <= target), None)
            summary["time_to_target_online_s"] = server.time_to_target
        keys = ("rank", "n_points", "points", "passes", "compute_s", "wait_s",
                "wait_cpu_fraction", "slowed_s", "commits", "aborted_points", "peak_rss_mib")
        summary["per_worker"] = [{**{k: r[k] for k in keys},
                                  "point_passes": {"min": r["visits"]["min"],
                                                   "max": r["visits"]["max"]}}
                                 for r in results]
        summary["stragglers"] = [s for r in results for s in r["stragglers"]]
        # Traversals of every point over the run, wherever it was trained (Section 4).
        visits = [r["visits"] for r in results]
        count = sum(v["count"] for v in visits)
        summary["point_passes"] = {"min": min(v["min"] for v in visits),
                                   "mean": sum(v["sum"] for v in visits) / max(count, 1),
                                   "max": max(v["max"] for v in visits)}
        summary.update(policy.summary())
        if any("migration" in r for r in results):
            moved = summary.setdefault("migration", {})
            for key in ("points_moved", "bytes_moved", "state_bytes", "reactivated"):
                moved[key] = sum(r["migration"][key] for r in results if "migration" in r)
            data_bytes = sum(r["data_bytes"] for r in results)
            moved["bytes_fraction"] = moved["bytes_moved"] / max(data_bytes, 1)
        if job["test_data"] is not None:
            summary["test"] = self._test_metrics(algorithm, server.theta)
        self.save_model(algorithm, server.theta, server.version, final_objective=final)
        write_json_atomic(self.dir / "summary.json", summary)
        return summary
