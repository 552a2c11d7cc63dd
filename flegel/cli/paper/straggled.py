"""Which algorithms a figure about stragglers judges: only those whose straggler straggled
(FSP paper Section 6.1, *Injected*; issue 19: Fig. 10, the migration row, Fig. 11).

The paper's *Injected* suspends a worker τ ms every 1,000 data points it processes.  A
worker that processes few points in a run is barely slowed: the quick CNN's workers hold
500 images each and reach the target within about two passes, so its straggler served one
or two 32 ms suspensions -- 4.3 % of BSPV's run on the page of 187f01c, 4.7 % (0.064 s of
1.37 s) on 191d4fb's, against 69-88 % for the other five algorithms -- and FSPV's straggler
without migration none (0.0 % of its 1.8 s run, in a sitting of 11c7635: it never
processed 1,000 images).  A claim about stragglers has nothing to observe there: under BSPV
the workers waited alike (Fig. 10 read a difference of 0.13 against FSPV's 0.15 as a miss),
and data migration had no slow worker to relieve and moved nothing (the migration row read
0.91x on 187f01c's page, "slower than without", a miss; 1.01x in that sitting).  Such a row
is shown and not judged (:func:`unslowed`), and the verdict names it (:func:`clause`).  A
failed run is judged: its failure counts.  The migration row now gives such an algorithm the
paper's *Natural* straggler instead, decided from its workload before the runs
(:func:`flegel.cli.paper.opt_figures.straggler`); the rule stays its guard (``slowed_s``
counts the *Natural* straggler's blocking delays too).
"""

from __future__ import annotations

from flegel.cli.paper.barriers import training_s
from flegel.cli.paper.runner import RunResult

#: A row is judged only where the run's most slowed worker spent at least this share of the
#: run's training time in its injected delays (module notes).
STRAGGLED_SHARE = 0.1


def slowed_share(run: RunResult) -> float:
    """The share of the run's training time its most slowed worker spent in injected delays
    (``per_worker``'s ``slowed_s``; 0 without a straggler that acted)."""
    workers = (run.summary or {}).get("per_worker") or []
    return max((float(w.get("slowed_s", 0.0)) for w in workers), default=0.0) / training_s(run)


def unslowed(run: RunResult) -> float | None:
    """The share :func:`slowed_share` where it is below :data:`STRAGGLED_SHARE` (the row is
    not judged), else None (judged; a failed run too: its failure counts)."""
    if not run.ok:
        return None
    share = slowed_share(run)
    return share if share < STRAGGLED_SHARE else None


def cell(share: float, whose: str) -> str:
    """A table's cell for a row not judged: ``whose`` names the run measured (``"BSPV's"``)."""
    return f"not judged: the straggler was slowed {100 * share:.1f} % of {whose} run"


def clause(unjudged: list[str], whose: str) -> str:
    """The verdict line's clause naming the algorithms not judged ("" where none)."""
    if not unjudged:
        return ""
    return (f"; not judged (the straggler slowed for less than {100 * STRAGGLED_SHARE:.0f} % "
            f"of {whose} run): {', '.join(unjudged)}")


def setting(whose: str) -> str:
    """The setting line's words on the rule."""
    return (f"an algorithm judged where {whose} straggler was slowed for at least "
            f"{100 * STRAGGLED_SHARE:.0f} % of its run")
