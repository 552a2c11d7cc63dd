"""The exact objective during a real run (issue 12, item 1): a target stop under FSPV with
an injected straggler ends on f(θ) at or below the target, and the progress line and
summary.json say which objective they show.

The reference is scikit-learn's optimum of the same penalized log-loss, not flegel's own.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression

from flegel.runtime.exact import NEAR_BUDGET
from tests.conftest import mpirun, summary, write_job

pytestmark = pytest.mark.mpi

N, ALPHA, WORKERS = 20_000, 1e-3, 3


def _optimum(x: np.ndarray, y: np.ndarray) -> float:
    """min over θ of Σ log-loss + N·α/2·|w|² (flegel's objective), by scikit-learn:
    its C·Σ log-loss + |w|²/2 is the same problem with C = 1/(N·α)."""
    clf = LogisticRegression(C=1.0 / (len(x) * ALPHA), tol=1e-10, max_iter=10_000).fit(x, y)
    z = x @ clf.coef_[0] + clf.intercept_[0]
    loss = np.logaddexp(0.0, -z * (2 * y - 1)).sum()
    return float(loss + len(x) * 0.5 * ALPHA * clf.coef_[0] @ clf.coef_[0])


def test_fspv_target_stop_ends_at_or_below_the_target_on_the_exact_objective(tmp_path: Path
                                                                             ) -> None:
    x, y = make_classification(N, n_features=10, n_informative=6, random_state=3)
    # Shuffled: with label-sorted shards and no migration, FSP's straggler holds one class
    # back and the objective never comes near the optimum (issue 11's subject, not this).
    np.savez(tmp_path / "xy.npz", X=x, y=y)
    target = _optimum(x, y) * 1.005
    job = write_job(tmp_path / "job.yaml", algorithm="logreg",
                    params={"learning_rate": 1.0, "schedule": "constant", "alpha": ALPHA},
                    data={"path": "xy.npz"}, workers=WORKERS,
                    sync={"model": "fspv"},
                    stragglers=[{"pattern": "injected", "tau_ms": 32, "every": 1000,
                                 "workers": [1]}],
                    stop={"target_objective": target, "max_time_s": 60, "tolerance": None,
                          "max_iterations": 10**7},
                    output={"progress": "plain"})
    out = tmp_path / "run"
    proc = mpirun(job, WORKERS, out, timeout=120)
    s = summary(out)
    assert s["stop_reason"] == "target", s["stop_reason"]
    # The final model's exact objective (evaluated again after training) met the target.
    assert s["final_objective"] <= target
    ex = s["exact_objective"]
    assert ex["evaluations"] >= 1
    last = ex["trace"][-1]
    assert last["exact"] and last["objective"] <= target
    assert last["objective"] == pytest.approx(s["final_objective"], rel=1e-9)
    # Evaluations within budget, give or take the last one.  The rule, checked at every
    # request after the first (whose estimate, a pass at the training rate, the summary
    # does not keep): the evaluations so far plus the next one's estimate (the last one's
    # cost) stay within the budget of the time they end at -- and once the online objective
    # reached the target (time_to_target_online_s), the first request after it comes at
    # once and later ones within NEAR_BUDGET (flegel/runtime/exact.py, "Near the target").
    # Checked on the recorded costs rather than as a share of this 0.2-0.5 s run: an
    # evaluation on a worker descheduled meanwhile cost 8.4 ms against 0.5 ms at load 17,
    # and one such at the end could take a short run's share past any fixed bound.  (1e-5:
    # the summary rounds to 1 µs.)
    trace, budget = ex["trace"], ex["budget"]
    near_s = s.get("time_to_target_online_s")

    def near(e: dict) -> bool:
        return near_s is not None and e["time_s"] >= near_s - 1e-6

    for i in range(1, len(trace)):
        share = budget
        if near(trace[i]):
            if not any(near(e) for e in trace[:i]):
                continue  # the crossing's evaluation: at once
            share = max(budget, NEAR_BUDGET)
        spent, est = sum(e["cost_s"] for e in trace[:i]), trace[i - 1]["cost_s"]
        assert spent + est <= share * (trace[i]["time_s"] + est) + 1e-5, (i, near_s, trace)
    # Hence all before the crossing but the last fit the budget of the training time.
    before = [e["cost_s"] for e in trace if not near(e)]
    assert sum(before[:-1]) <= budget * s["wall_time_s"] + 1e-5, ex
    # The progress line ends on the final θ's exact objective.
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("iter")]
    assert lines and lines[-1].endswith("done")
    assert f"{s['final_objective']:.6g}" in lines[-1] and "(online)" not in lines[-1]
