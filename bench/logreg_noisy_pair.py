"""What one noisy estimate among exact evaluations costs logistic regression's L-BFGS
(``algorithms/_quasinewton.py``, ``LBFGS``, "Estimated pairs"; issue 19): the review's
synthetic check.  f(u) = ½ Σ aᵢuᵢ² with a = 1, 3, 10, 30, 100 (``lipschitz`` 100), from
u₀ = 1; every evaluation exact but the 4th, an estimate whose f and ∇f carry noise of the
given share of f and |∇f|.  Prints, per noise level over the seeds, the evaluations to
f < 1e-10 (mean and max), the rejected exact evaluations per run (mean and max), and the
highest f of a point asked for, over f(u₀).

No clock, no data: the figures are the optimiser's.  ``--lbfgs FILE`` compares another
version of the module, e.g. ``git show d2a9933:algorithms/_quasinewton.py > /tmp/q.py``::

    python bench/logreg_noisy_pair.py [--seeds 300] [--lbfgs /tmp/q.py ...]
"""

from __future__ import annotations

import argparse
import importlib.util

import numpy as np

from flegel.algorithms._quasinewton import LBFGS

CURVATURES = np.array([1.0, 3.0, 10.0, 30.0, 100.0])
NOISES = (0.1, 0.5, 1.0, 2.0)


def objective(u: np.ndarray) -> tuple[float, np.ndarray]:
    """f and ∇f of the quadratic."""
    return 0.5 * float(CURVATURES @ (u * u)), CURVATURES * u


def trial(cls: type, noise: float, seed: int, at: int = 3, limit: int = 60
          ) -> tuple[int, float, int]:
    """(evaluations to f < 1e-10, or ``limit``; highest f asked for / f(u₀); rejected exact
    evaluations) of one run whose evaluation ``at`` is a noisy estimate."""
    rng = np.random.default_rng(seed)
    opt = cls(float(CURVATURES.max()))
    u = np.ones(len(CURVATURES))
    f0 = worst = objective(u)[0]
    rejected = 0
    for k in range(limit):
        f, g = objective(u)
        if k == at:
            f_est = f * (1 + noise * rng.normal())
            g_est = g + noise * float(np.linalg.norm(g)) * rng.normal(size=len(g))
            u = opt.step(u, f_est, g_est, exact=False)
        else:
            if f < 1e-10:
                return k, worst / f0, rejected
            u = opt.step(u, f, g)
            rejected += not opt.accepted
        worst = max(worst, objective(u)[0])
    return limit, worst / f0, rejected


def load(path: str) -> type:
    """``LBFGS`` of another version of ``_quasinewton.py``."""
    spec = importlib.util.spec_from_file_location(f"lbfgs_{abs(hash(path))}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.LBFGS


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=300)
    ap.add_argument("--lbfgs", nargs="*", default=[], help="other _quasinewton.py files")
    args = ap.parse_args()
    versions = {"this": LBFGS} | {path: load(path) for path in args.lbfgs}
    for name, cls in versions.items():
        print(name)
        for noise in NOISES:
            r = np.array([trial(cls, noise, seed) for seed in range(args.seeds)])
            print(f"  noise {noise:4.0%} of |∇f|: evaluations {r[:, 0].mean():.1f} "
                  f"(max {r[:, 0].max():.0f}), rejected {r[:, 2].mean():.2f} "
                  f"(max {r[:, 2].max():.0f}), highest f / f(u₀) {r[:, 1].max():.2g}")


if __name__ == "__main__":
    main()
