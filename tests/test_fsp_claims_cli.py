"""``bench/fsp_claims.py`` refuses an unknown ``--workloads`` label before any run."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def test_an_unknown_workload_label_is_named_before_any_run() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "fsp_claims.py"), "--only",
                           "ratio", "--workloads", "blobs,overlapp"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "--workloads: expected labels among blobs, overlap, found 'overlapp'" in proc.stderr
    assert "time to target" not in proc.stdout
