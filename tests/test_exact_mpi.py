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
    # Evaluations within budget, give or take the last one (the rule keeps them <= 5% of
    # the time they end at).
    assert ex["cost_fraction"] <= 0.15
    # The progress line ends on the final θ's exact objective.
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("iter")]
    assert lines and lines[-1].endswith("done")
    assert f"{s['final_objective']:.6g}" in lines[-1] and "(online)" not in lines[-1]
