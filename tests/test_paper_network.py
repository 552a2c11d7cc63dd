"""Table 2's meter (:class:`flegel.cli.paper.network.LinkMeter`) on sample traces: the
throughput of a transfer is read inside its busy stretches, the first and last samples
(part idle) left out, for every column alike."""

from __future__ import annotations

import math

import pytest

from flegel.cli.paper.network import Cluster, LinkMeter

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


def test_the_edges_of_a_transfer_do_not_lower_its_throughput():
    # A transfer at the link's rate that starts 70 % into a sample and ends 40 % into one.
    m = meter([0, 0, 0.3 * RATE, *[RATE] * 8, 0.4 * RATE, 0, 0])
    assert [len(run) for run in m.stretches()] == [10]
    assert m.mb_s() == pytest.approx(RATE / 1e6, rel=1e-6)


def test_a_gap_inside_a_transfer_counts_and_a_short_burst_does_not():
    # A window boundary where the link idled half a sample is the transfer's own loss; a
    # burst of two samples (a job's start-up) says nothing about a transfer.
    m = meter([0, 0.5 * RATE, 0.9 * RATE, 0, 0.4 * RATE, *[RATE] * 4, 0.5 * RATE, *[RATE] * 4,
               0.3 * RATE, 0])
    assert [len(run) for run in m.stretches()] == [2, 11]
    total, seconds = m.busy()
    assert seconds == pytest.approx(9 * DT)
    assert m.mb_s() == pytest.approx((8 + 0.5) * RATE / 9 / 1e6, rel=1e-6)


def test_no_transfer_reads_nan():
    assert math.isnan(meter([0, 0, 0.1 * RATE, 0]).mb_s())
    assert math.isnan(meter([RATE, RATE]).mb_s())  # one stretch of two: no inside
