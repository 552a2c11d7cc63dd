"""The link samples behind Table 2's figures (:mod:`flegel.cli.paper.network`), per column.

Every Table 2 run writes ``link-samples.json`` beside its ``summary.json`` (the meter's
samples of the straggler host's byte counter for the link, *Normal* and *Only* columns,
written after each, so a run that failed part way has the columns before it).  This prints,
for each such file under the folders given, the moves migration made, then per column its
busy stretches, its throughput as the table reads it (:meth:`LinkMeter.mb_s`) beside the
reading of every busy sample with nothing left out or joined (``mb_s(edges=True)``, the
reading before the meter's edge and gap rules), both readings' *Normal* / *Only*, and every
sample's rate in MB/s, marked as the meter reads it:

* ``[`` ``]``: the first and last sample of a stretch, left out; ``[x]``: a stretch of one;
* ``_``: below the busy floor (inside a stretch: idle between windows, counted);
* ``(N idle)``: N samples below the floor outside any stretch, shown as their count (no
  sample is left out of the line).

Usage::

    python bench/table2_samples.py runs/paper-quick-.../table2 [more folders...]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from flegel.cli.paper.network import LinkMeter

COLUMNS = ("link", "normal", "only")


def line(meter: LinkMeter) -> str:
    """The samples of one column, marked as :meth:`LinkMeter.busy` reads them."""
    busy = meter.is_busy()
    start = {a: b for a, b in meter.spans()}
    out: list[str] = []
    i, n = 0, len(busy)
    while i < n:
        if i in start:
            stop = start[i]
            for j, (dt, db) in enumerate(meter.intervals()[i:stop], i):
                text = f"{db / dt / 1e6:.1f}" if dt > 0 else "0"
                text += "" if busy[j] else "_"
                if stop - i == 1:
                    text = f"[{text}]"
                elif j == i:
                    text = "[" + text
                elif j == stop - 1:
                    text += "]"
                out.append(text)
            i = stop
        else:
            k = i
            while k < n and k not in start:
                k += 1
            out.append(f"({k - i} idle)")
            i = k
    return " ".join(out)


def column(name: str, dump: dict[str, Any]) -> str:
    """One column's line: stretches, both readings, the marked samples."""
    meter = LinkMeter.load(dump)
    try:
        meter.cluster.link_bps()
    except ValueError:
        return f"  {name:6} link rate {dump.get('rate')!r}: no busy floor, not read"
    return (f"  {name:6} {meter.mb_s():5.2f} MB/s (every busy sample: "
            f"{meter.mb_s(edges=True):5.2f}), stretches {[len(r) for r in meter.stretches()]}: "
            f"{line(meter)}")


def report(path: Path) -> list[str]:
    """The lines of one ``link-samples.json``."""
    dump = json.loads(path.read_text())
    summary_path = path.parent / "summary.json"
    if summary_path.exists():
        summary = json.loads(summary_path.read_text())
        rounds = (summary.get("migration") or {}).get("round_log", [])
        head = f"{path.parent}: moves (source, target, points) per round: " + str(
            [r.get("moves", []) for r in rounds])
    else:
        head = f"{path.parent}: no summary.json (the Normal run did not finish): moves unknown"
    lines = [head]
    for name in COLUMNS:
        lines.append(column(name, dump[name]) if name in dump
                     else f"  {name:6} not measured (the run stopped before it)")
    if "normal" in dump and "only" in dump:
        normal, only = LinkMeter.load(dump["normal"]), LinkMeter.load(dump["only"])
        try:
            lines.append(f"  Normal / Only {normal.mb_s() / only.mb_s():.2f} (every busy sample: "
                         f"{normal.mb_s(edges=True) / only.mb_s(edges=True):.2f})")
        except ValueError:
            pass  # no link rate: said on the column's line
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("folders", nargs="+", type=Path)
    args = ap.parse_args(argv)
    found = 0
    for folder in args.folders:
        for path in sorted(folder.rglob("link-samples.json")):
            found += 1
            print("\n".join(report(path)))
    if not found:
        print(f"no link-samples.json under {', '.join(map(str, args.folders))}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
