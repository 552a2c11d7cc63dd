"""The data and jobs of ``flegel paper``: the FSP paper's six algorithms on its shapes.

Each algorithm runs on a synthetic stand-in for the data set the paper used with it (Table 1,
``data.like``; the kind follows the algorithm: blobs for the EM algorithms, classes for LR and
the CNN, a non-negative low-rank matrix for NMF), scaled to fit (:class:`Mode`).  The rows are
generated once, **sorted** (by cluster or class; NMF's rows by their sum) and written to one
file, so that the two partitions the figures use differ as real files do:

* ``contiguous``: each worker one range of the sorted rows -- a few clusters or one class of
  its own (what a file written in order and split by byte ranges gives);
* ``strided``: rows dealt round-robin -- every worker a sample of everything ("shuffled").

Choices where the paper is vague: K-means starts from random centres with one start (with
k-means++ and restarts the start is already within the target and nothing is measured);
the straggler setting of the paper's default, *Injected* with τ = 32 ms per 1,000 points on
a quarter of the workers (1 of 4 here, 4 of 16 in ``--full``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from flegel.data.synthetic import TABLE1, SyntheticSpec, generate_rows

#: The paper's six algorithms, in its order (Section 6.1).
ALGORITHMS = ("kmeans", "gmm", "fcm", "logreg", "nmf", "cnn")

#: The two partitions every comparison can run on (module notes).
PARTITIONS = ("contiguous", "strided")


@dataclass(frozen=True)
class Mode:
    """How big and how long: ``quick`` for a 2-core laptop, ``full`` for a cluster.

    Attributes
    ----------
    name : str
        ``quick`` or ``full``.
    workers : int
        Workers per job.
    slow : str
        The straggling workers (``stragglers[].workers``): a quarter of them, as in the paper.
    scale : float
        Multiplies every workload's rows.
    max_time_s, ref_time_s : float
        Training time per run, and for the reference runs that set the targets.
    sweep : tuple of float
        τ values (ms) of Fig. 9a.
    pairs : int
        BSPV/FSPV pairs per algorithm of Fig. 8's horizons
        (:func:`flegel.cli.paper.horizons.measure`): 2, one in each order -- two pairs in
        opposite orders take the order effect out, and a horizon is shown only where both
        have it.  3 took Fig. 8 from 187 s to 393 s and the page to 17.5 min, over the 15 min
        it must fit in on a 2-core machine (issue 19).
    pairs_most : int
        The most pairs of a row whose runs are short (:data:`flegel.cli.paper.horizons.
        SHORT_S`): while its pairs leave the median's side of 1 undecided
        (:func:`flegel.cli.paper.horizons.decided`) it takes two more, one in each order (an
        odd count would give one order more pairs than the other), while
        ``pairs_budget_s`` allows.  ``quick``: 4 (2, then 2 more); ``full``: 6.
    pairs_budget_s : float
        Seconds the extra pairs (past ``pairs``) of all of Fig. 8's rows may take together
        (:class:`flegel.cli.paper.horizons.PairBudget`, one per figure): ``quick`` 60 s, so
        the page grows by about a minute at most.  A short row's pair costs mostly start-up
        and evaluation: about 8 s (4 s a run) at the last page's load of 3.5
        (``docs/benchmarks.md``, "Fig. 8's short rows", "The page's time").
    local_beside_cluster : bool
        Whether Fig. 13 runs its six runs on this host too when the local cluster is up
        (:func:`flegel.cli.paper.opt_figures.fig13`): there the cluster's runs decide the
        verdict, and the local ones are only shown.  ``quick``: no (29 s of the last page);
        ``full``: yes.  With no cluster up the local runs are the figure in both modes.
    calm_rounds : int
        Rounds of the SpecSync row without stragglers
        (:func:`flegel.cli.paper.other_figures.specsync`): that setting is the SpecSync
        paper's own, shown beside the straggler's, which alone is judged over
        :data:`~flegel.cli.paper.other_figures.SPECSYNC_ROUNDS` rounds.  ``quick``: 1 (the
        two rounds more were 16 s of the last page); ``full``: as many as the judged
        setting.
    all_horizons : bool
        Whether Fig. 12 runs each of its four settings over the whole ``max_time_s``
        (:func:`flegel.cli.paper.opt_figures.fig12`); the verdict reads only FSPV+asyn's
        with the straggler.  ``quick``: no -- the other three are shown over the horizon
        only where their run to the target already lasted it (22 s of the last page);
        ``full``: yes.
    fine_references : bool
        Whether a reference run evaluates every θ snapshot after training and keeps
        :data:`~flegel.cli.paper.runner.REFERENCE_TRACE_FACTOR` times the workload's
        ``trace_points`` (:meth:`flegel.cli.paper.runner.Runner.target`), so that it can
        stand for BSPB's run to its target without stragglers
        (:func:`~flegel.cli.paper.runner.stands_for_run_to_target`).  ``quick``: yes (a
        reference of 4-22 iterations then stands for a BSPB run of 2-8 s); ``full``: no --
        its 600 s references at 20x the data run far past the target, thin their trace
        and never stand for BSPB, so evaluating every snapshot would cost for nothing;
        BSPB runs to the target there.
    """

    name: str
    workers: int
    slow: str
    scale: float
    max_time_s: float
    ref_time_s: float
    sweep: tuple[float, ...] = (8.0, 32.0, 128.0)
    pairs: int = 2
    pairs_most: int = 6
    pairs_budget_s: float = 240.0
    local_beside_cluster: bool = True
    calm_rounds: int = 3
    all_horizons: bool = True
    fine_references: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def slow_count(self) -> int:
        lo, _, hi = self.slow.partition("-")
        return int(hi or lo) - int(lo) + 1


QUICK = Mode("quick", workers=4, slow="1", scale=1.0, max_time_s=4.0, ref_time_s=5.0,
             pairs=2, pairs_most=4, pairs_budget_s=60.0, local_beside_cluster=False,
             calm_rounds=1, all_horizons=False, fine_references=True)
FULL = Mode("full", workers=16, slow="1-4", scale=20.0, max_time_s=120.0, ref_time_s=600.0)
MODES = {"quick": QUICK, "full": FULL}


@dataclass(frozen=True)
class Workload:
    """One algorithm on its stand-in data set (module notes)."""

    algorithm: str
    like: str
    kind: str
    n_points: int
    n_features: int
    params: dict[str, Any]
    labelled: bool
    slack: float  # target: the reference objective + slack · |objective|
    data: dict[str, Any] = field(default_factory=dict)  # extra SyntheticSpec fields
    block: int | None = None  # sync.block for slow-per-point algorithms
    trace_points: int = 40  # θ snapshots evaluated after training (NMF, CNN: costly)
    #: The slack of Section 6.3's figures' runs with the straggler (data migration: Figs.
    #: 11 and 12, the migration row; :mod:`flegel.cli.paper.opt_figures`); None: ``slack``.
    #: The rule: one decade tighter than ``slack``, only where FSPV (no migration) reached
    #: ``slack``'s target at <= 1.0 of the straggler's passes at ``--quick`` -- within its
    #: first pass, before migration can spare any: K-means and LR, at 0.8-1.0 (the others
    #: at >= 1.9: GMM and FCM 1.9, the CNN 2.5, NMF 9.5).  At these FSPV reached K-means'
    #: at 1.2-1.35 of the straggler's passes and LR's at 0.87-1.38, LR's at the regime's
    #: edge (its 1e-4 not within 6 s, past the page's 4 s).  Calibrated at ``--quick``
    #: only: ``--full`` (16 workers, 20x the data) uses it unchecked; the figures show the
    #: straggler's passes at FSPV's target on every page (``opt_figures.straggler_passes``).
    passes_slack: float | None = None

    def describe(self) -> str:
        """``"HIGGS-like blobs, 110,000 x 28"``."""
        return (f"{self.like.upper()}-like {self.kind}, {self.n_points:,} x "
                f"{self.n_features:,}")


def workloads(mode: Mode) -> dict[str, Workload]:
    """The six workloads at ``mode``'s scale (the paper's pairs: KMs/HIGGS, GMM and FCM/MASS,
    LR/HIGGS, NMF/ML10M, CNN/MNIST; NMF's 10,681 columns cut to 400 and MNIST to 2,000
    images in ``quick``)."""
    s = mode.scale

    def rows(like: str, frac: float) -> int:
        return int(TABLE1[like]["n_points"] * frac * s)

    return {w.algorithm: w for w in [
        Workload("kmeans", "higgs", "blobs", rows("higgs", 0.01), 28,
                 {"n_clusters": 16, "init": "random", "n_init": 1}, False, 1e-3,
                 {"centers": 16, "cluster_std": 4.0}, passes_slack=1e-4),
        Workload("gmm", "mass", "blobs", rows("mass", 0.005), 27,
                 {"n_components": 8, "covariance_type": "diag", "init": "kmeans++"}, False,
                 1e-5, {"centers": 8, "cluster_std": 4.0}),
        Workload("fcm", "mass", "blobs", rows("mass", 0.005), 27,
                 {"n_clusters": 8, "m": 2.0, "init": "kmeans++"}, False, 1e-3,
                 {"centers": 8, "cluster_std": 4.0}),
        Workload("logreg", "higgs", "classification", rows("higgs", 0.01), 28,
                 {"learning_rate": 0.5, "alpha": 1e-4}, True, 1e-2, {"noise": 0.3},
                 passes_slack=1e-3),
        Workload("nmf", "ml10m", "nonnegative", int(8000 * s), 400,
                 {"n_components": 10, "solver": "hals", "init": "random"}, False, 1e-2,
                 {"rank": 10, "noise": 0.3}, trace_points=10),
        Workload("cnn", "mnist", "images", int(2000 * s), 784,
                 {"n_filters": [6, 12], "kernel_size": 5, "pool_size": 2,
                  "learning_rate": 0.1, "momentum": 0.0}, True, 5e-2, {}, block=64,
                 trace_points=10),
    ]}


def write_data(w: Workload, folder: Path) -> Path:
    """Generate ``w``'s rows, sort them (module notes) and save them under ``folder``.

    Returns
    -------
    Path
        ``<algorithm>.npy`` (features only) or ``<algorithm>.npz`` (``X`` and ``y``); an
        existing file is reused.
    """
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{w.algorithm}.{'npz' if w.labelled else 'npy'}"
    if path.exists():
        return path
    spec = SyntheticSpec(w.kind, w.n_points, w.n_features, seed=1, **w.data)
    X, y = generate_rows(spec, range(w.n_points))
    key = y if y is not None else X.sum(axis=1)
    order = np.argsort(key, kind="stable")
    if w.labelled:
        assert y is not None
        np.savez(path, X=X[order], y=y[order])
    else:
        np.save(path, X[order])
    return path


def write_job(w: Workload, mode: Mode, data: Path, partition: str, folder: Path) -> Path:
    """The job file of ``w`` on ``partition`` (BSPB, no stragglers, no stop target: the
    runs add those with ``--set``)."""
    job: dict[str, Any] = {
        "name": f"paper-{w.algorithm}", "algorithm": w.algorithm, "params": w.params,
        "data": {"path": str(data.resolve()), "partition": partition},
        "workers": mode.workers, "seed": 0,
        "sync": {"model": "bsp", "batch": "full", **({"block": w.block} if w.block else {})},
        "stop": {"max_iterations": 1_000_000, "tolerance": None,
                 "max_time_s": mode.max_time_s},
        "output": {"progress": "none", "trace_points": w.trace_points, "save_model": False}}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{w.algorithm}-{partition}.yaml"
    path.write_text(yaml.safe_dump(job, sort_keys=False))
    return path
