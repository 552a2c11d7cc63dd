"""FSPV's interval for an algorithm that progresses per update (issue 19, the CNN).

A mini-batch step on the mean gradient (FSP paper Eq. 1) makes about the same progress per
update whatever the points in it, so Eq. 7 with g(η) = c/η is largest at the shortest
interval allowed; the probes, read on the online objective (a point's loss change since its
last visit, a pass ago), cannot see it and favoured the longer interval.  With
``Algorithm.progress_per_update`` FSPV takes the lower end of its trust region.
"""

from __future__ import annotations

import math

import pytest

from algorithms.cnn import CNN
from algorithms.fcm import FuzzyCMeans
from algorithms.gmm import GaussianMixture
from algorithms.kmeans import KMeans
from algorithms.logreg import LogisticRegression
from algorithms.nmf import NMF
from flegel.interval import multistage
from flegel.interval.base import Observation
from flegel.interval.multistage import PROBE_REPEAT, TRUST_FACTOR, MultiStage
from tests.fakes import Simulation, blobs, kmeans_theta0

PHI = 0.002  # the iterations' cost beyond their interval


def probed(adjustor: MultiStage, eta0: float, eta_max: float) -> float:
    """Start ``adjustor`` at ``eta0`` and run its probes with g(η₂) = 1.4 g(η₁) (what the
    online objective showed after the CNN's calibration pass); the interval it then runs."""
    plan = adjustor.start(eta0, eta_max)
    for _ in range(6 * PROBE_REPEAT):
        if adjustor.phase != "probe":
            break
        eta = plan.eta_s
        rate = 1000.0 * (1.4 if eta > eta0 else 1.0)
        plan = adjustor.observe(Observation(eta_s=eta, progress=rate * eta, valid_s=eta,
                                            wall_s=eta + PHI, barrier_s=PHI,
                                            eta_max_s=eta_max))
    assert adjustor.phase == "run"
    return plan.eta_s


def test_a_per_update_algorithm_runs_the_shortest_interval_the_probes_allow():
    eta0 = 0.04
    lo = eta0 / math.sqrt(2.0) / TRUST_FACTOR
    assert probed(MultiStage(per_update=True), eta0, 1.0) == pytest.approx(lo)
    # The same probes for a per-point algorithm: Eq. 7 fits the line and goes longer.
    assert probed(MultiStage(), eta0, 1.0) > eta0


def test_the_shortest_interval_is_never_below_the_iteration_cost():
    eta0 = 1.5 * PHI  # η₁ / TRUST_FACTOR would be far below φ
    assert probed(MultiStage(per_update=True), eta0, 1.0) == pytest.approx(PHI)


def test_the_cnn_alone_declares_progress_per_update():
    assert CNN(n_filters=(2,), kernel_size=3).progress_per_update
    for alg in (KMeans(n_clusters=2), GaussianMixture(n_components=2), FuzzyCMeans(),
                NMF(n_components=2), LogisticRegression()):
        assert not alg.progress_per_update, alg.name


class PerUpdateKMeans(KMeans):
    progress_per_update = True


@pytest.mark.parametrize("per_update", [False, True])
def test_fsp_passes_the_declaration_to_its_adjustor(per_update, monkeypatch):
    """An η under a pass (1 ms, η_min 0.1 ms) makes FSPV probe; after the probes a per-update
    algorithm takes the trust region's lower end without fitting Eq. 7 (``best_interval``),
    a per-point one fits it."""
    fits: list[float] = []
    fit = multistage.best_interval

    def counting(*args, **kwargs):
        fits.append(1.0)
        return fit(*args, **kwargs)

    monkeypatch.setattr(multistage, "best_interval", counting, raising=True)
    x, centres = blobs(n=600, seed=0)
    alg = PerUpdateKMeans(n_clusters=4) if per_update else KMeans(n_clusters=4)
    sim = Simulation("fsp", {"interval": "multistage", "eta_ms": 1.0, "eta_min_ms": 0.1},
                     workers=3, data=x, theta0=kmeans_theta0(centres), algorithm=alg,
                     stop={"max_iterations": 12})
    assert isinstance(sim.policy.adjustor, MultiStage)
    assert sim.policy.adjustor.per_update is per_update
    sim.run()
    phases = [e["phase"] for e in sim.barrier_events()]
    assert "probe" in phases and phases[-1] == "run"
    assert bool(fits) is not per_update
