"""Section 6.3 of the FSP paper: asynchronous data migration and semi-centralized
coordination (Figs. 11-13), and all six algorithms under migration (issue 19, item 5).

FSPV without migration is the baseline, as in the paper; *asyn* is ``fspv-async``
(``sync: {model: fsp, migration: {mode: async}}``), *sync* ``fspv-sync``, and the centralized
coordination ``sync.coordination=centralized`` on top of *asyn*.  Every run: contiguous shards
of sorted data, the *Injected* straggler, unless said otherwise.
"""

from __future__ import annotations

import math

from flegel.cli.paper import plots
from flegel.cli.paper.common import NAMES, Ctx, failures, geo_mean, time_row
from flegel.cli.paper.page import Figure
from flegel.cli.paper.runner import Ratio, RunResult
from flegel.cli.report import delta_f_picture, passes_picture

CENTRALIZED = ("sync.coordination=centralized",)


def _migration(r: RunResult) -> str:
    m = (r.summary or {}).get("migration") or {}
    if not m or not m.get("points_moved"):
        return "-"
    return f"{int(m['points_moved']):,} ({100 * float(m.get('bytes_fraction', 0)):.0f} %)"


def _passes(r: RunResult) -> list[float]:
    return [float(w["passes"]) for w in (r.summary or {}).get("per_worker", [])]


def migration(ctx: Ctx) -> Figure:
    """All six algorithms with async migration against FSPV without it (item 5)."""
    inj = ctx.injected()
    head = ["algorithm", "data", "FSPV", "FSPV+asyn", "speedup", "moved (bytes)",
            "passes max/min (asyn)"]
    table = [time_row(head), time_row(["---"] * len(head))]
    ratios, runs, failed = [], [], []
    for a in ctx.algorithms():
        off = ctx.run(a, "contiguous", "fspv-off", inj)
        asyn = ctx.run(a, "contiguous", "fspv-async", inj)
        runs += [off, asyn]
        if not asyn.ok:
            failed.append(a)
        r = Ratio.of(off.time, asyn.time)
        ratios.append(r)
        p = _passes(asyn)
        table.append(time_row([a, ctx.data(a), off.time.text(), asyn.time.text(), r.text(),
                               _migration(asyn),
                               f"{max(p) / max(min(p), 1e-9):.2f}" if p else "-"]))
    slower = [a for a, r in zip(ctx.algorithms(), ratios)
              if r.value < 0.95 and r.qualifier in ("", "<")]
    mean = geo_mean(ratios)
    pic = plots.bars(ctx.pictures / "migration.png", f"six algorithms under migration, {inj}",
                     list(ctx.algorithms()),
                     {"FSPV": [r.time.s for r in runs[0::2]],
                      "FSPV+asyn": [r.time.s for r in runs[1::2]]},
                     "seconds to target (cap: not reached)", log=True)
    return Figure(
        "migration", "all six algorithms under async migration",
        "asyn improves FSPV's runtime on every algorithm (Fig. 11: by up to 55.8 %)",
        holds=not failed and not slower,
        ours=f"geometric mean speedup {mean.text()}; failed: {', '.join(failed) or 'none'}; "
             f"slower than without: {', '.join(slower) or 'none'}",
        setting=f"sync: {{model: fsp, migration: {{mode: async}}}} against migration off; "
                f"contiguous shards of sorted data, {inj}", table=table + failures(runs),
        pictures=[pic])


def fig11(ctx: Ctx) -> Figure:
    """Fig. 11: FSPV against *asyn*, *sync* and the centralized coordination."""
    inj = ctx.injected()
    head = ["algorithm", "FSPV", "+asyn", "+sync", "+asyn centralized", "asyn gain",
            "sync gain", "semi vs centralized", "FSPV+opt vs FSPB"]
    table = [time_row(head), time_row(["---"] * len(head))]
    gains, runs = {}, []
    for a in ("kmeans", "logreg"):
        base = ctx.run(a, "contiguous", "fspv-off", inj)
        asyn = ctx.run(a, "contiguous", "fspv-async", inj)
        sync = ctx.run(a, "contiguous", "fspv-sync", inj)
        cent = ctx.run(a, "contiguous", "fspv-async", inj, CENTRALIZED)
        fspb = ctx.run(a, "contiguous", "fspb-off", inj)
        runs += [base, asyn, sync, cent, fspb]
        g_a = 100 * (1 - asyn.time.s / max(base.time.s, 1e-9))
        g_s = 100 * (1 - sync.time.s / max(base.time.s, 1e-9))
        g_c = 100 * (1 - asyn.time.s / max(cent.time.s, 1e-9))
        gains[a] = g_a
        table.append(time_row([a, base.time.text(), asyn.time.text(), sync.time.text(),
                               cent.time.text(), f"{g_a:.1f} %", f"{g_s:.1f} %", f"{g_c:.1f} %",
                               Ratio.of(fspb.time, asyn.time).text()]))
    best = max(gains, key=lambda k: gains[k])
    q = Ratio.of(ctx.run(best, "contiguous", "fspv-off", inj).time,
                 ctx.run(best, "contiguous", "fspv-async", inj).time).qualifier
    pic = plots.bars(ctx.pictures / "fig11.png", f"Fig. 11: {inj}", ["kmeans", "logreg"],
                     {lab: [r.time.s for r in runs[i::5]] for i, lab in enumerate(
                         ["FSPV", "+asyn", "+sync", "+asyn centralized", "FSPB"])},
                     "seconds to target (cap: not reached)", log=True)
    return Figure(
        "11", "asynchronous vs synchronous migration, semi vs centralized",
        "asyn cuts FSPV's runtime by up to 55.8 % (KMs, Injected); sync can cost 35.9 %; semi "
        "up to 32.5 % better than centralized; FSPV+opt 4.5x FSPB", paper_value=55.8,
        ours=f"asyn cuts FSPV's runtime by {gains[best]:.1f} % ({best}; a bound where a run "
             "did not reach the target)", ours_value=gains[best],
        qualifier={">": ">", "<": "<"}.get(q, q),
        setting=f"K-means and LR, contiguous shards of sorted data, {inj}",
        table=table + failures(runs), pictures=[pic])


def fig12(ctx: Ctx) -> Figure:
    """Fig. 12: passes and Σ Δf per worker, with and without the straggler."""
    inj = ctx.injected()
    runs = [(f"{NAMES[s]} {'injected' if st != 'none' else 'no stragglers'}",
             ctx.run("kmeans", "contiguous", s, st))
            for st in ("none", inj) for s in ("fspv-off", "fspv-async")]
    head = ["run", "passes per worker", "max/min", "moved (bytes)"]
    table = [time_row(head), time_row(["---"] * 4)]
    for label, r in runs:
        p = _passes(r)
        table.append(time_row([label, " ".join(f"{x:.1f}" for x in p),
                               f"{max(p) / max(min(p), 1e-9):.2f}" if p else "-",
                               _migration(r)]))
    p = _passes(runs[3][1])
    spread = max(p) / max(min(p), 1e-9) if p else float("inf")
    pics = [x for x in (plots.run_picture(ctx.pictures / "fig12-passes.png", runs,
                                          passes_picture),
                        plots.run_picture(ctx.pictures / "fig12-delta-f.png", runs,
                                          delta_f_picture)) if x]
    return Figure(
        "12", "passes and Σ Δf per worker under async migration",
        "with asyn the workers' passes even out and Σ Δf only slightly favours the fast "
        "workers (no number); issue 19 asks max/min passes <= 1.3", paper_value=1.3,
        higher_better=False, ours=f"max/min passes with asyn and the straggler: {spread:.2f}",
        ours_value=spread, setting=f"K-means, contiguous shards of sorted data, none and {inj}",
        table=table + failures([r for _, r in runs]), pictures=pics)


def _ms(value: float) -> str:
    return "failed" if math.isnan(value) else f"{value:.2f}"


def _x(value: float) -> str:
    return "failed" if math.isnan(value) else f"{value:.2f}x"


def fig13(ctx: Ctx) -> Figure:
    """Fig. 13: the barrier cost of semi-centralized against centralized coordination."""
    inj = ctx.injected()
    head = ["algorithm", "barrier ms (centralized)", "barrier ms (semi)", "iterations c / s",
            "accumulated cost c / s"]
    table = [time_row(head), time_row(["---"] * 5)]
    ratio = {}
    runs = []
    for a in ("kmeans", "logreg"):
        semi = ctx.run(a, "contiguous", "fspv-async", inj)
        cent = ctx.run(a, "contiguous", "fspv-async", inj, CENTRALIZED)
        runs += [semi, cent]
        b = {k: (r.summary or {}).get("mean_barrier_s", float("nan")) * 1e3
             for k, r in (("s", semi), ("c", cent))}
        n = {k: int((r.summary or {}).get("iterations", 0)) for k, r in (("s", semi),
                                                                          ("c", cent))}
        acc = (b["c"] * n["c"]) / max(b["s"] * n["s"], 1e-9)
        ratio[a] = b["c"] / max(b["s"], 1e-9)
        table.append(time_row([a, _ms(b["c"]), _ms(b["s"]), f"{n['c']} / {n['s']}",
                               "failed" if math.isnan(acc) else f"{acc:.2f}x"]))
    # A failed run (listed under the table) decides nothing: the other algorithm's ratio does.
    decided = [ratio[a] for a in ("kmeans", "logreg") if not math.isnan(ratio[a])]
    return Figure(
        "13", "semi-centralized coordination: barrier cost",
        "semi cuts the accumulated synchronization cost from 48.4 s to 38.3 s (1.26x) though "
        "it runs more iterations (KMs)", paper_value=48.4 / 38.3,
        ours=f"mean barrier cost centralized / semi: {_x(ratio['kmeans'])} (K-means), "
             f"{_x(ratio['logreg'])} (LR)",
        ours_value=decided[0] if decided else float("nan"),
        setting=f"K-means and LR with asyn, contiguous, {inj} (the paper: *Natural*)",
        table=table + failures(runs))
