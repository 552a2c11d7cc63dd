"""The link samples behind Table 2's figures (:mod:`flegel.cli.paper.network`), per column.

Every Table 2 run writes ``link-samples.json`` beside its ``summary.json`` (the meter's
samples of the straggler host's byte counter for the link, *Only* and *Normal* columns).
This prints, for each such file under the folders given, the moves migration made, then
each column's busy stretches, its throughput as the table reads it, and every sample's
rate in MB/s (``_``: below the busy floor; ``[`` ``]``: the first and last sample of a
stretch, left out), so a dip inside a transfer (a window boundary where the link idled)
can be seen where it happened.

Usage::

    python bench/table2_samples.py runs/paper-quick-.../table2 [more folders...]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from flegel.cli.paper.network import BUSY


def line(column: dict, bps: float) -> str:
    """The samples of one column, marked as :meth:`LinkMeter.busy` reads them."""
    floor = BUSY * bps
    rates = [(b1 - b0) / (t1 - t0) if t1 > t0 else 0.0
             for (t0, b0), (t1, b1) in zip(column["samples"], column["samples"][1:])]
    busy = [r > floor for r in rates]
    out = []
    for i, r in enumerate(rates):
        if r < 0.02 * floor:
            continue
        text = f"{r / 1e6:.1f}"
        if not busy[i]:
            text += "_"
        elif i == 0 or not busy[i - 1]:
            text = "[" + text
        elif i + 1 == len(rates) or not busy[i + 1]:
            text += "]"
        out.append(text)
    return " ".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", type=Path)
    args = ap.parse_args()
    for folder in args.folders:
        for path in sorted(folder.rglob("link-samples.json")):
            dump = json.loads(path.read_text())
            summary = json.loads((path.parent / "summary.json").read_text())
            moves = [r["moves"] for r in summary["migration"]["round_log"]]
            print(f"{path.parent}: moves (source, target, points) per round: {moves}")
            for name in ("link", "only", "normal"):
                col = dump[name]
                rate = col["rate"].lower().removesuffix("bit")
                bps = float(rate[:-1]) * {"k": 1e3, "m": 1e6, "g": 1e9}[rate[-1]] / 8
                mb_s = col["busy_bytes"] / col["busy_s"] / 1e6 if col["busy_s"] else float("nan")
                print(f"  {name:6} {mb_s:5.2f} MB/s, stretches {col['stretches']}: "
                      f"{line(col, bps)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
