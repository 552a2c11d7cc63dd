"""bench/fsp_timeline.py ``--steps``: each θ update up to the target, split into the
slowest worker's time, the reports' spread and the master's part (issue 19, Fig. 8)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "fsp_timeline.py"


@pytest.fixture(scope="module")
def timeline() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_fsp_timeline_steps", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_fsp_timeline_steps"] = module
    spec.loader.exec_module(module)
    return module


def test_steps_up_to_the_target(timeline: ModuleType, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    barriers = [(0.010, [0.004, 0.006], 0.003, 0.002), (0.022, [0.002, 0.009], 0.005, 0.001),
                (0.030, [0.002, 0.002], 0.001, 0.0005), (0.041, [0.003, 0.002], 0.002, 0.001)]
    (run / "events.jsonl").write_text("".join(
        json.dumps({"t": i + 1, "time_s": t, "barrier_s": bar, "spread_s": spread,
                    "workers": {"compute_s": comp}}) + "\n"
        for i, (t, comp, bar, spread) in enumerate(barriers)))
    (run / "summary.json").write_text(json.dumps(
        {"objective_trace": [[0.0099, 9.0], [0.0219, 5.0], [0.0299, 2.0], [0.0409, 1.0]]}))
    st = timeline.steps(run, 2.0)
    # Up to the barrier whose snapshot reached 2.0 (the third), no further.
    assert [round(x["at"], 3) for x in st] == [10.0, 22.0, 30.0]
    assert [round(x["comp"], 3) for x in st] == [6.0, 9.0, 2.0]
    assert [round(x["spread"], 3) for x in st] == [2.0, 1.0, 0.5]
    assert [round(x["master"], 3) for x in st] == [1.0, 4.0, 0.5]
    # Never reached: every update of the run.
    assert len(timeline.steps(run, 0.5)) == 4
