"""Table 2's meter (:class:`flegel.cli.paper.network.LinkMeter`) on sample traces: the
throughput of a transfer is read inside its busy stretches, the first and last samples
(part idle) left out and the idle between windows counted, for every column alike; the
table's median and verdict with a column too short to read; *Only*'s windows are the
migrator's."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from flegel.cli.paper.network import (
    JOIN_IDLE,
    Cluster,
    LinkMeter,
    Row,
    holds,
    median,
    only_windows,
    table,
)
from tests.bench_scripts import load_bench
from tests.test_migration_windows import _sending

RATE = 25e6  # 200mbit in bytes per second
DT = 0.02


def meter(rates: list[float]) -> LinkMeter:
    """A meter whose samples, DT apart, carried ``rates`` (bytes per second) in turn."""
    m = LinkMeter(Cluster("t", ["h1", "h2", "h3"], "200mbit"), ["h2"])
    t, b = 0.0, 0
    m.samples = [(t, b)]
    for r in rates:
        t, b = t + DT, b + int(r * DT)
        m.samples.append((t, b))
    return m


def windows(n: int, on_s: float, off_s: float, start: float = 0.013) -> tuple[LinkMeter, float]:
    """A meter of ``n`` windows at the link's rate, ``on_s`` long and ``off_s`` apart,
    sampled every DT, and the transfer's true throughput (MB/s) from its first byte to its
    last."""
    def sent(t: float) -> float:
        period = on_s + off_s
        k, into = divmod(max(t - start, 0.0), period)
        k = min(k, n)
        return RATE * (k * on_s + (min(into, on_s) if k < n else 0.0))

    end = start + n * on_s + (n - 1) * off_s
    m = LinkMeter(Cluster("t", ["h1", "h2", "h3"], "200mbit"), ["h2"])
    m.samples = [(i * DT, int(sent(i * DT))) for i in range(int((end + 0.1) / DT))]
    return m, RATE * n * on_s / (end - start) / 1e6


def test_the_edges_of_a_transfer_do_not_lower_its_throughput() -> None:
    # A transfer at the link's rate that starts 70 % into a sample and ends 40 % into one.
    m = meter([0, 0, 0.3 * RATE, *[RATE] * 8, 0.4 * RATE, 0, 0])
    assert [len(run) for run in m.stretches()] == [10]
    assert m.mb_s() == pytest.approx(RATE / 1e6, rel=1e-6)


def test_a_gap_inside_a_transfer_counts_and_a_short_burst_does_not() -> None:
    # A window boundary where the link idled half a sample is the transfer's own loss; a
    # burst of two samples (a job's start-up) further off says nothing about a transfer.
    m = meter([0, 0.5 * RATE, 0.9 * RATE, *[0] * (JOIN_IDLE + 1), 0.4 * RATE, *[RATE] * 4,
               0.5 * RATE, *[RATE] * 4, 0.3 * RATE, 0])
    assert [len(run) for run in m.stretches()] == [2, 11]
    total, seconds = m.busy()
    assert seconds == pytest.approx(9 * DT)
    assert m.mb_s() == pytest.approx((8 + 0.5) * RATE / 9 / 1e6, rel=1e-6)


def test_an_idle_sample_between_windows_lowers_the_reading() -> None:
    # Two windows with a whole idle sample between: one stretch, the idle sample counted
    # (split there, each part's inside read the link's full rate).
    m = meter([0, 0.5 * RATE, RATE, RATE, 0, RATE, RATE, 0.5 * RATE, 0])
    assert [len(run) for run in m.stretches()] == [7]
    assert m.mb_s() == pytest.approx(4 / 5 * RATE / 1e6, rel=1e-6)
    assert m.mb_s(edges=True) > m.mb_s()


def test_spaced_windows_read_near_their_true_throughput() -> None:
    """Windows of 50 ms with 45 ms idle between (a Normal job's pauses) read about what the
    transfer did, not the link's rate; back to back they read the link's rate."""
    spaced, true = windows(8, 0.050, 0.045)
    assert len(spaced.stretches()) == 1
    assert spaced.mb_s() == pytest.approx(true, rel=0.05)
    assert spaced.mb_s() < 0.6 * RATE / 1e6
    back_to_back, true = windows(8, 0.050, 0.0)
    assert back_to_back.mb_s() == pytest.approx(RATE / 1e6, rel=1e-3)
    # Further apart than JOIN_IDLE samples: separate transfers, each read inside.
    apart, _ = windows(3, 0.2, (JOIN_IDLE + 2) * DT)
    assert len(apart.stretches()) == 3
    assert apart.mb_s() == pytest.approx(RATE / 1e6, rel=1e-3)


def test_no_transfer_reads_nan() -> None:
    assert math.isnan(meter([0, 0, 0.1 * RATE, 0]).mb_s())
    assert math.isnan(meter([RATE, RATE]).mb_s())  # one stretch of two: no inside


def test_a_meter_loads_from_its_dump() -> None:
    m = meter([0, 0.5 * RATE, RATE, 0, RATE, 0.5 * RATE, 0])
    back = LinkMeter.load(m.dump())
    assert back.stretches() == m.stretches() and back.mb_s() == m.mb_s()


def _row(link: float, only: float, normal: float, t: float | None = 1.0) -> Row:
    return Row("200mbit", link, only, normal, t, 1_000_000, {})


def test_a_column_too_short_to_read_is_no_verdict_and_no_median() -> None:
    nan = float("nan")
    assert not holds([_row(25, 20, 19.6), _row(12, 10, nan)])  # min() would say 0.98
    assert holds([_row(25, 20, 19.6), _row(12, 10, 9.7)])
    assert not holds([_row(25, 20, 19.0)])
    m = median([_row(25, 20, nan), _row(24, 21, 19.0), _row(26, nan, 18.0)])
    assert (m.link, m.only, m.normal) == (25, 20.5, 18.5)
    assert m.too_short == {"only": 1, "normal": 1}
    line = table([m])[-1]
    assert "20.5 (1 too short)" in line and "18.5 (1 too short)" in line
    assert "too short" in table([_row(25, nan, nan)])[-1]
    assert "nan" not in table([_row(25, nan, nan)])[-1]


def test_only_sends_the_migrators_windows() -> None:
    """*Only*'s windows of a move are those the migrator posts to its target."""
    moves = {2: 3000, 3: 100, 4: 257}
    port, m = _sending(moves)
    while m.quota:
        port.pending.clear()
        m.step(port)
    for target, points in moves.items():
        posted = [k for d, k in port.windows() if d == target]
        assert posted == only_windows(points, 64), target


def _bench() -> Any:
    return load_bench("table2_samples")


def test_the_bench_prints_each_columns_samples_and_both_readings(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = _bench()
    run = tmp_path / "run-200mbit-0"
    run.mkdir()
    normal = meter([0, 0.5 * RATE, RATE, RATE, 0, RATE, RATE, 0.5 * RATE, 0, *[0] * 5,
                    RATE, 0])
    dump = {"link": meter([0, 0.3 * RATE, *[RATE] * 4, 0.4 * RATE, 0]).dump(),
            "normal": normal.dump(), "only": {**meter([0, RATE, 0]).dump(), "rate": "none"}}
    (run / "link-samples.json").write_text(json.dumps(dump))
    (run / "summary.json").write_text(json.dumps(
        {"migration": {"round_log": [{"moves": [[1, 2, 5000]]}]}}))
    assert bench.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "[[1, 2, 5000]]" in out
    both = f"{normal.mb_s():5.2f} MB/s (every busy sample: {normal.mb_s(edges=True):5.2f})"
    assert both in out
    assert "[12.5 25.0 25.0 0.0_ 25.0 25.0 12.5]" in out  # the idle sample inside: counted
    assert "(6 idle) [25.0]" in out and "(1 idle)" in out  # a stretch of one; none dropped
    assert "link rate 'none': no busy floor" in out
    assert "Normal / Only" not in out  # Only has no rate: no ratio
    dump["only"] = meter([0, 0.5 * RATE, *[RATE] * 5, 0.5 * RATE, 0]).dump()
    (run / "link-samples.json").write_text(json.dumps(dump))
    assert bench.main([str(tmp_path)]) == 0
    ratio = f"Normal / Only {normal.mb_s() / 25:.2f} (every busy sample: "
    assert ratio + f"{normal.mb_s(edges=True) / (6 * 25 / 7):.2f})" in capsys.readouterr().out
    # A run stopped after its link column: no summary, no Normal or Only, no crash.
    (run / "summary.json").unlink()
    (run / "link-samples.json").write_text(json.dumps({"link": dump["link"]}))
    assert bench.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "no summary.json" in out and "normal not measured" in out
    assert bench.main([str(tmp_path / "nothing")]) == 1
