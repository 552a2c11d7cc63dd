"""A checkpoint's workers made one consistent cut again: every point trained by exactly one
worker after a resume, and no migration message waited for.

A checkpoint is taken when no worker computes and no window is being sent
(:mod:`flegel.rundir.checkpoint`), but a window whose send completed may still be on its way:
MPI completes a small send once it is buffered, not once the target took it.  Each worker's
state is its own snapshot, so a window in transit is in neither (the source locked its
points, the target had not admitted them: trained by no one after a resume), or in both (the
source's snapshot came before it sent, the target's after it admitted). The message counts
disagree too: a resumed target would wait at the end for a window that no one sends again
(seen as a hang of ``tests/test_checkpoint_mpi.py``'s resumed FSP job, 3 in 20 runs).

:func:`consistent_cut` settles both from the workers' states alone, on the master before
they are sent back; each worker then applies its part
(:meth:`flegel.runtime.store.ShardStore.settle_cut`) and its migration starts with no
message in flight (:meth:`flegel.balance.migration.Migrator.resumed`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flegel.runtime.store import origin_of

#: A worker's part of the cut in its resumed state (``state[CUT]``).
CUT = "migration_cut"


def consistent_cut(workers: dict[int, dict[str, Any]]) -> dict[int, dict[str, np.ndarray]]:
    """Which points each worker takes back and gives up so that each is trained once.

    A point trained nowhere (every copy inactive: in transit) is taken back by the holder
    of its most trained copy (most visits; a tie goes to a holder that is not its origin:
    the copy that moved last); a point trained by several workers is kept by that same rule
    and given up by the others.

    Parameters
    ----------
    workers : dict
        Rank -> the worker's checkpoint state (``state["store"]`` holds ``ids``,
        ``n_native``, ``inactive`` and ``visits``).

    Returns
    -------
    dict
        Rank -> ``{"take_back": ids, "give_up": ids}``, for the ranks with something to do.
    """
    stores = [state["store"] for state in workers.values()]
    if all(len(s["ids"]) == s["n_native"] and not np.any(s["inactive"]) for s in stores):
        return {}  # nothing ever moved (no migration): nothing can be in transit
    ranks, ids, active, visits = [], [], [], []
    for rank, state in workers.items():
        store = state["store"]
        n = len(store["ids"])
        ranks.append(np.full(n, rank, dtype=np.int64))
        ids.append(np.asarray(store["ids"], np.int64))
        active.append(~np.asarray(store["inactive"], bool))
        visits.append(np.asarray(store["visits"], np.int64))
    rank_a, id_a = np.concatenate(ranks), np.concatenate(ids)
    act_a, vis_a = np.concatenate(active), np.concatenate(visits)
    uniq, inverse = np.unique(id_a, return_inverse=True)
    n_active = np.bincount(inverse, weights=act_a, minlength=len(uniq))
    wrong = n_active[inverse] != 1  # copies of points trained by none or by several
    if not wrong.any():
        return {}
    # The copy to keep per wrong point: most visits, then not at its origin, then lowest rank.
    idx = np.flatnonzero(wrong)
    away = rank_a[idx] != origin_of(id_a[idx])
    order = np.lexsort((rank_a[idx], ~away, -vis_a[idx], inverse[idx]))
    first = np.ones(len(order), dtype=bool)
    first[1:] = inverse[idx][order][1:] != inverse[idx][order][:-1]
    keep = np.zeros(len(id_a), dtype=bool)
    keep[idx[order][first]] = True
    out: dict[int, dict[str, np.ndarray]] = {}
    for rank in workers:
        mine = rank_a == rank
        take = id_a[mine & keep & ~act_a]
        give = id_a[mine & wrong & ~keep & act_a]
        if len(take) or len(give):
            out[rank] = {"take_back": take, "give_up": give}
    return out
