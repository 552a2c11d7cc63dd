"""Each FSP worker's predicted full pass: how long it would take to traverse its shard at its
own speed (FSP paper Section 3.3: a full pass ends an iteration; that a worker which cannot
finish its own soon after the first is a straggler the others should not wait for is this
project's choice where the paper is silent, see ``FSP._on_pass``).

One estimate serves every judgement FSP makes on a worker's speed
(:class:`flegel.sync.fsp.FSP`): who is paused at once when the first pass of an iteration
arrives (``_on_pass``), whether a worker straggles so that whole passes stop (``_balanced``),
and the typical pass that bounds a whole pass (``_whole_bound``).  It is *not* the longest
useful interval η_max (``FSP._update_eta_max``), which is a time on the clock -- what a pass
of the fastest worker takes with its polls and waits for a core, so that η covers it -- not
a judgement of speed.

The prediction is a worker's fastest recent kernel time per point (``1/rate`` of its last
:data:`PASS_HISTORY` commits) plus its injected delays per point over those commits (the
straggler patterns' suspensions and slow-downs, ``slowed_s``), times the points it holds
(``n_active``); where those commits processed no point, its kernel time for its points plus
the delays themselves (below):

* **not wall time** (an iteration's ``compute_s``, or a sum of them): where ranks share
  cores it counts the time a worker waited for a core, which says nothing about its speed
  and only ever adds.  Measured (issue 19, 4 workers and the master on 2 shared cores at a
  load of 8-10): a worker that ran late in one iteration read as a pass of 10-52 ms against
  1.3-5 ms, was paused at once after the next first passes, committed 0 points and so never
  measured itself again.  Hence the *fastest* kernel time: a kernel preempted by another
  process is only ever slower.  A worker on a persistently slower (or persistently loaded)
  host is slow in every kernel, and its fastest is slow too;
* **delays summed over the history**, not taken per commit: an injected straggler computes
  a burst of points at full speed, then sleeps through several iterations (a suspension cut
  short by a barrier is owed: FSP's overlap serves it in the waits for θ that follow, else
  the next iterations do), so one commit can look fast -- the first try of the whole-pass
  rule judged the best of each worker's recent passes and called such a straggler fast
  after each burst.  Under FSP's overlap (``sync.overlap``, the worker loop's "Overlap") a
  commit's ``slowed_s`` is only the suspension served *within* its iteration: what is
  served during a wait for θ shows in no commit, so the delays per point read here are the
  straggler's pace within the shared barrier windows, not its pattern's per-point cost
  (τ every ``every`` points).  That is the pace a pass of it takes while the others'
  barriers come and go, which is what a predicted pass is for; no regression was measured
  (``python bench/migration_sim.py --straggler``, docs/sync/fsp.md, "Overlap");
* **a commit of no points and no delay forgets the worker** (it was paused before it ran):
  it is no straggler until measured again, so a worker that missed one iteration is not
  paused at once in the next and left unmeasured for good -- unless its recent commits carry
  injected delays (a straggler by its pattern, which a wait for a core never adds): then the
  commit takes its oldest commit off its evidence (and that commit's delay off the
  prediction at once), so a straggler that had served its suspension and was paused before
  its next block stays paused at once (forgotten, it ran unpredicted for
  :data:`~flegel.sync.fsp.PASS_EVIDENCE` iterations, sleeping through the second while the
  others waited for its timer), and one whose pattern ended is measured again within
  ``PASS_HISTORY`` such commits.  Commits of no points *with* a delay
  (a suspension served over several iterations) keep it a straggler: with no point among
  its recent commits its delays are no rate per point, and its pass is predicted as its
  kernel time for its points plus the delays it served (``n_active · min kernel + Σ
  delay``; counting them as one point's delay, as first done, multiplied them by
  ``n_active``: 32 s for a 33 ms pass, which inflated ``typical``, ``fastest`` and the
  bounds built on them).  A worker that has only slept (no kernel time yet) has no speed
  to predict from and stays unpredicted until it computes.  Dropping it there (issue 19,
  Figs. 10 and 13) left an *Injected* straggler unpredicted after four such commits; under
  semi-centralized coordination its own timer then held every worker a whole η while it
  slept (``tests/test_fsp_sleeping_straggler.py``, whose ``-s`` output prints the mean
  barrier on the simulated clock now: 0.61 ms under both coordinations).

Before issue 19's clean-up FSP kept a second, wall-time estimate for whole passes (each
worker's ``compute_s`` over its points in its last 5 commits): it called a worker that
waited for a core a straggler, which the estimate here was made to avoid, and the two
docstrings contradicted each other.
"""

from __future__ import annotations

from collections.abc import Mapping

from flegel.state import AttributeState

#: Commits a worker's predicted pass is taken from.
PASS_HISTORY = 4


class PassPredictor(AttributeState):
    """Each worker's predicted full pass (module notes), from its commits' headers.

    Attributes
    ----------
    pass_s : dict of int to float
        Rank -> predicted seconds of a full pass of its shard; a rank without a prediction
        (nothing measured yet, or forgotten) is absent.
    """

    def __init__(self, history: int = PASS_HISTORY) -> None:
        self.history = history
        self.pass_s: dict[int, float] = {}
        #: Rank -> (kernel seconds per point of its recent commits that processed points,
        #: (points, injected delay) of its recent commits).
        self._log: dict[int, tuple[list[float], list[tuple[float, float]]]] = {}

    def observe(self, commits: Mapping[int, Mapping[str, float]]) -> None:
        """Take in one barrier's commits (COMMIT headers: ``points``, ``rate``,
        ``slowed_s``, ``n_active``)."""
        for r, h in commits.items():
            kernels, delays = self._log.setdefault(r, ([], []))
            slowed = float(h.get("slowed_s", 0.0))
            if h["points"] > 0 and h["rate"] > 0:
                kernels.append(1.0 / h["rate"])
            elif slowed <= 0:
                if len(delays) > 1 and any(d > 0 for _, d in delays):
                    # Slowed by its pattern before (no preempted kernel): one commit less
                    # of evidence, so it is paused at once until its evidence runs out --
                    # on what is left of it: the dropped commit's delay no longer counts.
                    del delays[0]
                    self._predict(r, float(h["n_active"]))
                else:
                    self.forget(r)
                continue
            delays.append((float(h["points"]), slowed))
            del kernels[:-self.history], delays[:-self.history]
            self._predict(r, float(h["n_active"]))

    def _predict(self, rank: int, n_active: float) -> None:
        """Set (or drop) ``rank``'s predicted pass from its log (module notes)."""
        kernels, delays = self._log[rank]
        if not kernels or n_active <= 0:
            # Never measured a kernel (it has only slept so far): no speed to predict from;
            # it stays unpredicted -- not paused at the first pass -- until it computes.
            self.pass_s.pop(rank, None)
            return
        points = sum(p for p, _ in delays)
        slowed = sum(d for _, d in delays)
        if points > 0:
            self.pass_s[rank] = n_active * (min(kernels) + slowed / points)
        else:
            # Recent commits all slowed with no point (a suspension served over several
            # iterations): its pass at its kernel time plus the delays it served -- no
            # per-point rate to extrapolate by (as if it did one point in that time, the
            # prediction was n_active times the delays: 32 s for a 33 ms pass).
            self.pass_s[rank] = n_active * min(kernels) + slowed

    def forget(self, rank: int) -> None:
        """Drop what is known of ``rank``'s speed."""
        self._log.pop(rank, None)
        self.pass_s.pop(rank, None)

    def evidence(self, rank: int) -> int:
        """How many commits the prediction for ``rank`` rests on (0: none)."""
        log = self._log.get(rank)
        return len(log[1]) if log is not None and rank in self.pass_s else 0

    def fastest(self) -> float:
        """The shortest predicted pass (0 when none is known)."""
        return min(self.pass_s.values(), default=0.0)

    def typical(self) -> float:
        """The lower median of the predicted passes (0 when none is known): with half the
        workers slow, the fast half's."""
        values = sorted(self.pass_s.values())
        return values[(len(values) - 1) // 2] if values else 0.0

    def stragglers(self, factor: float, evidence: int) -> list[int]:
        """Ranks whose predicted pass, resting on at least ``evidence`` commits, is beyond
        ``factor`` times the typical worker's (:meth:`typical`)."""
        bound = factor * self.typical()
        return sorted(r for r, p in self.pass_s.items()
                      if p > bound and self.evidence(r) >= evidence)
