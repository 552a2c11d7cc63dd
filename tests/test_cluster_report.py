"""Where each rank ran, in what users read (issue 20), without a cluster: the report's
workers' table and page name the hosts of ``summary.json``'s ``per_worker[].host``; the
launcher names a dead rank's host when it is not its own.  Runs across real hosts:
tests/test_cluster.py."""

from __future__ import annotations

import json
import socket
from pathlib import Path

from flegel.cli import report
from flegel.cli.launch import _where
from flegel.cli.report_page import _workers
from flegel.rundir.reader import Run
from flegel.runtime.lifetime import started_marker
from tests.test_report import make_run


def _with_hosts(path: Path, hosts: dict[int, str]) -> Path:
    summary = json.loads((path / "summary.json").read_text())
    for w in summary["per_worker"]:
        w["host"] = hosts[w["rank"]]
    (path / "summary.json").write_text(json.dumps(summary))
    return path


def test_the_workers_table_names_each_workers_host(tmp_path: Path) -> None:
    run = _with_hosts(make_run(tmp_path / "r", migration=False), {1: "h2", 2: "h3", 3: "h1"})
    lines = report.describe(run).splitlines()
    assert lines[1].split()[-1] == "host"
    rows = {int(ln.split()[0]): ln.split() for ln in lines[2:5]}
    assert {r: row[-1] if row[-1] != "(slowed)" else row[-2] for r, row in rows.items()} == {
        1: "h2", 2: "h3", 3: "h1"}
    page = _workers(Run.read(run, "r"))
    assert "<th>host</th>" in page
    assert all(f"<td>{h}</td>" in page for h in ("h1", "h2", "h3"))


def test_a_run_without_hosts_has_no_host_column(tmp_path: Path) -> None:
    run = make_run(tmp_path / "r", migration=False)
    assert "host" not in report.describe(run).splitlines()[1]


def test_the_launcher_names_a_dead_ranks_host_when_it_is_another(tmp_path: Path) -> None:
    status = tmp_path / "status"
    assert _where(status, 2, 77) == "pid 77"  # no start marker: nothing known
    Path(started_marker(str(status), 2)).write_text("h3")
    assert _where(status, 2, 77) == "host h3, pid 77"
    Path(started_marker(str(status), 2)).write_text(socket.gethostname())
    assert _where(status, 2, 77) == "pid 77"  # this host: the pid says it
