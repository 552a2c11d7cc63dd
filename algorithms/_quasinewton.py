"""L-BFGS driven one evaluation per barrier (exact full batches, or estimated stratified
batches), and the diagonal preconditioner the gradient-trained algorithms share.

The FSP paper trains logistic regression by gradient steps (Section 2.1, Eq. 1) with a fixed
step η.  A fixed η only works when it suits the data's scale: on raw features (pixel values
0..16) the curvature is hundreds of times that of standardised ones, and a step that suits one
oscillates or crawls on the other.  scikit-learn fits ``LogisticRegression`` with L-BFGS, which
needs no step size.  Under full-batch BSP (BSPB) every barrier delivers the exact objective and
gradient of the current θ, which is all L-BFGS needs: :class:`LBFGS` is a state machine that
takes one (f, ∇f) per barrier and returns the next point to evaluate -- either the next iterate
along the quasi-Newton direction or, when the Armijo condition fails, a shorter trial along the
same direction (backtracking with quadratic interpolation).  One barrier is one function
evaluation, as one iteration of scipy's L-BFGS usually is.  An evaluation may also be an
*estimate* (FSP's stratified batch at θ, a sample of the straggler's shard): it is taken
without the Armijo test, its curvature pair only if its curvature is plausible, its step
bounded, and the next exact evaluation re-bases the line search (:meth:`LBFGS.step`).

:class:`Preconditioner` is the internal standardisation: the optimiser works on
``w' = σ ⊙ w``, ``b' = b + μ·w`` (μ, σ the features' mean and deviation, estimated from the
job's sample), in which the problem is well conditioned; θ stays in the original units, so
workers, saved models and predictions never see the change.  The same coordinates give a
Lipschitz bound for incremental (mini-batch) gradient steps.
"""

from __future__ import annotations

from collections import deque

import numpy as np

__all__ = ["LBFGS", "Preconditioner"]


class Preconditioner:
    """Affine change of coordinates ``(w, b) <-> u`` that standardises the features.

    Parameters
    ----------
    shift : ndarray of shape (d,)
        Feature means μ (zeros without an intercept: centring needs one).
    scale : ndarray of shape (d,)
        Feature deviations σ (> 0).
    """

    def __init__(self, shift: np.ndarray, scale: np.ndarray) -> None:
        self.shift = np.asarray(shift, dtype=np.float64)
        self.scale = np.asarray(scale, dtype=np.float64)

    @staticmethod
    def estimate(sample: np.ndarray, center: bool) -> tuple[np.ndarray, np.ndarray]:
        """(μ, σ) of the sample's columns; a constant column gets σ = 1, and σ is floored at
        1e-3 of the largest deviation so a nearly constant feature cannot make the penalty's
        curvature α/σ² dominate."""
        x = np.asarray(sample, dtype=np.float64)
        if x.ndim != 2 or len(x) == 0:
            d = x.shape[1] if x.ndim == 2 else 0
            return np.zeros(d), np.ones(d)
        mu = x.mean(axis=0) if center else np.zeros(x.shape[1])
        sd = x.std(axis=0)
        top = float(sd.max()) if sd.size else 0.0
        sd = np.where(sd > 0, np.maximum(sd, 1e-3 * top), 1.0)
        return mu, sd

    def to_u(self, coef: np.ndarray, intercept: np.ndarray) -> np.ndarray:
        """The optimiser's coordinates of (coef, intercept), flattened."""
        w = coef * self.scale[:, None] if coef.ndim == 2 else coef * self.scale
        b = intercept + self.shift @ coef
        return np.concatenate([w.ravel(), np.ravel(b)])

    def from_u(self, u: np.ndarray, coef_shape: tuple[int, ...]) -> tuple[np.ndarray,
                                                                          np.ndarray]:
        """(coef, intercept) in the original units of the point ``u``."""
        size = int(np.prod(coef_shape))
        w = u[:size].reshape(coef_shape)
        coef = w / self.scale[:, None] if len(coef_shape) == 2 else w / self.scale
        intercept = u[size:] - self.shift @ coef
        return coef, np.asarray(intercept, dtype=np.float64).reshape(-1)

    def grad_u(self, g_coef: np.ndarray, g_intercept: np.ndarray) -> np.ndarray:
        """The gradient in ``u`` of a function whose gradient in (coef, intercept) is given:
        ``∂/∂w'_j = (∂/∂w_j − μ_j ∂/∂b) / σ_j`` and ``∂/∂b' = ∂/∂b`` (chain rule through
        ``w = w'/σ``, ``b = b' − μ·w``)."""
        gb = np.ravel(g_intercept)
        if g_coef.ndim == 2:
            gw = (g_coef - np.outer(self.shift, gb)) / self.scale[:, None]
        else:
            gw = (g_coef - self.shift * gb[0]) / self.scale
        return np.concatenate([gw.ravel(), gb])

    def lipschitz(self, sample: np.ndarray, curvature: float, alpha: float,
                  intercept: bool) -> float:
        """An estimate of the gradient's Lipschitz constant in ``u`` on the sample:
        ``curvature · λ_max(ZᵀZ / m) + α / min σ²`` with Z the standardised sample (and a
        column of ones for the intercept); ``curvature`` bounds the loss's second derivative
        in the margin (¼ for the logistic loss, ½ for softmax)."""
        x = np.asarray(sample, dtype=np.float64)
        if x.ndim != 2 or len(x) == 0:
            return 1.0 + alpha
        z = (x - self.shift) / self.scale
        if intercept:
            z = np.column_stack([z, np.ones(len(z))])
        top = float(np.linalg.norm(z, 2)) ** 2 / len(z)
        return max(curvature * top + alpha / float(np.min(self.scale)) ** 2, 1e-12)


class LBFGS:
    """Limited-memory BFGS with a backtracking Armijo line search, one evaluation per call.

    Call :meth:`step` with the objective and gradient at the point it asked for last (the
    first call: at the starting point); it returns the next point to evaluate.  A point whose
    value meets the Armijo condition ``f ≤ f_k + c₁ a ∇f_kᵀd`` becomes the new iterate (its
    curvature pair is stored when ``sᵀy > 0``); otherwise the step ``a`` shrinks by quadratic
    interpolation, clamped to [0.1 a, 0.5 a].  A direction that is not a descent direction, or
    a line search that shrinks below round-off, resets the memory to a steepest-descent step
    of length ``1 / lipschitz``.

    An evaluation may be an estimate (``exact=False``: a stratified batch at θ, a sample of
    a straggler's shard; issue 19): it is taken without the Armijo test, its curvature pair
    screened (:data:`MU`, :data:`CAP`) and its step bounded (:data:`GROWTH`), and the first
    exact evaluation after it re-bases the line search (:meth:`step`).

    **Estimated pairs** (issue 19, Fig. 8 without stragglers).  The screened pairs with an
    estimated end stay in the memory for the first exact evaluation after an estimate, and
    the pair across the switch (an estimated end, an exact one) is screened as one: they
    steer that iterate's step only.  The step is bounded as an estimated one (``GROWTH``),
    at its first rejection it is searched again from the iterate without them
    (``steered``: at most one rejected evaluation on the steered direction), and the next
    exact iterate drops them.  The pair across the switch takes a memory slot, so after
    the drop the memory may hold one exact pair fewer than had they been dropped at once.
    Where no screened estimated pair is in the memory (none passed the screen, or all were
    evicted) nothing is steered and the first exact step after an estimate is not
    bounded, as before this rule: the line search alone guards it.  While estimates and
    exact evaluations alternate one for one (a persistent straggler) the estimated pairs
    are never dropped and every exact step is steered, hence bounded.  The screen does not
    bound the steps: each kept pair has a
    curvature along s within [MU·L, CAP·L], so H stays positive definite and H₀ (the newest
    pair's ``sᵀy / yᵀy``) within [1/(CAP·L), 1/(MU·L)], but the bound on H of m such pairs
    grows with m; a step built on them relies on the length bound and the line search.
    Dropped at the first exact evaluation (as before), one estimated evaluation among exact
    ones -- FSPV's whole pass cut short by a pause or a timer, the other shards whole and
    one mid-pass, an aggregate at θ of most of the data -- left the exact step after it
    with the memory of the steps before the estimate only, and cost about one L-BFGS
    iteration.  Offline (``flegel paper``'s LR, 110,000 x 28, strided shards, every
    evaluation exact but the one at θ₂; ``bench/logreg_cut_pass.py``): θ₄'s objective
    24,862 with 79 % of one shard at θ₂ (26,598 with the pairs dropped), 24,845 with two
    shards empty (26,536); the exact path's 24,876 (the 0.2 s horizon's target).  Kept
    without the bound and the second search, for as long as the memory holds them, they
    cost on noisy estimates (``bench/logreg_noisy_pair.py``: f = ½ Σ aᵢuᵢ², a = 1, 3,
    10, 30, 100, L = 100, every evaluation exact but the 4th, whose gradient has noise of
    10 / 50 / 100 / 200 % of |∇f|, 300 seeds): evaluations to f < 1e-10 16.7 / 19.0 /
    20.0 / 20.9 on average against 16.7 / 17.2 / 17.7 / 17.9 dropped, rejected exact
    evaluations 0.80 / 0.68 / 0.61 / 0.61 per run against 0.37 / 0.33 / 0.33 / 0.41, and
    a trial point at 15x f(u₀) (dropped: none above f(u₀)); as here 15.0 / 17.5 / 18.7 /
    19.4, rejected 0.21 / 0.34 / 0.55 / 0.63, none above f(u₀).

    Parameters
    ----------
    lipschitz : float
        Curvature estimate: the first step and every reset are ``−∇f / lipschitz``.
    memory : int, default=10
        Curvature pairs kept (scipy's ``maxcor`` default).
    c1 : float, default=1e-4
        Armijo constant.
    """

    #: The curvature an estimated pair must show along s, as a share of ``lipschitz``.
    MU = 1e-3
    #: How far above ``lipschitz`` an estimated pair's ``yᵀy / sᵀy`` may be (L is itself
    #: estimated from a sample).
    CAP = 4.0
    #: An estimated iterate's step, and the step estimated pairs steer, is at most this
    #: many times the last move (or the steepest-descent step ``|∇f| / lipschitz``, if
    #: longer): a trust region growing geometrically, so a direction built on noisy pairs
    #: cannot jump far at once.  Over k estimated steps in a row it allows 2^k; the pairs'
    #: screen (``MU``, ``CAP``) keeps H positive definite and H₀ within [1/(CAP·L),
    #: 1/(MU·L)], not H itself (class notes, "Estimated pairs"); measured in review on 500
    #: estimated steps in a row: no blow-up.
    GROWTH = 2.0

    def __init__(self, lipschitz: float, memory: int = 10, c1: float = 1e-4) -> None:
        self.lipschitz = float(lipschitz)
        self.c1 = c1
        # (s, y, 1 / sᵀy, both ends exact)
        self.pairs: deque[tuple[np.ndarray, np.ndarray, float, bool]] = deque(maxlen=memory)
        self.x: np.ndarray | None = None
        self.f = 0.0
        self.g: np.ndarray | None = None
        self.d: np.ndarray | None = None
        self.a = 1.0
        self.slope = 0.0
        #: Whether the last point given to :meth:`step` was accepted as the iterate.
        self.accepted = False
        #: Whether the iterate's f and ∇f are exact (not a stratified batch's estimates).
        self.exact = True
        #: Whether the direction is an exact iterate's built with pairs that have an
        #: estimated end (its first rejection drops them: class notes, "Estimated pairs").
        self.steered = False

    def step(self, u: np.ndarray, f: float, g: np.ndarray, exact: bool = True) -> np.ndarray:
        """Take the value ``f`` and gradient ``g`` at ``u`` (the point asked for last);
        return the next point to evaluate.

        ``exact=False`` marks an *estimate* of f and ∇f at ``u`` (a stratified batch: a
        sample of some terms of the sum).  Two estimates are of different samples, so the
        Armijo test between them compares noise: a lucky-low estimate accepted as f_k would
        reject every later point, exact ones included.  An estimate therefore becomes the
        iterate without the test (:meth:`restart`), and so does the first exact evaluation
        after an iterate that was estimated: the line search only ever compares two
        evaluations of one kind, exact with exact -- unless its value is not finite: that
        point is backtracked from, as a rejected one.  A non-finite value at the first
        point is no reference either: it is not taken, and the point halfway to the origin
        is asked for (:meth:`_reject`)."""
        rebase = not exact or not self.exact
        if not np.isfinite(f):
            return self._reject(u, f)
        if (self.x is None or self.d is None or rebase
                or f <= self.f + self.c1 * self.a * self.slope):
            return self._accept(u, f, g, exact)
        return self._reject(u, f)

    def _reject(self, u: np.ndarray, f: float) -> np.ndarray:
        """The next point after ``u``, whose value ``f`` is not taken (an Armijo rejection,
        or a non-finite value): shorter along the direction, or the direction without its
        estimated pairs (``steered``).  Without an iterate yet (a non-finite value at the
        first point) ``u / 2``, towards the origin, where logistic regression's objective is
        log K (finite) whatever the start (an init file may set it elsewhere); where the
        data make the objective non-finite everywhere this makes no progress and the run
        ends on its own limits."""
        self.accepted = False
        if self.x is None or self.d is None or self.g is None:
            return 0.5 * np.asarray(u, dtype=np.float64)
        if self.steered:
            # the first rejection on a direction that estimated pairs built: drop them and
            # search again from the iterate (class notes, "Estimated pairs")
            self._drop_estimated()
            return self._direction(0.0)
        excess = f - self.f - self.slope * self.a
        a = 0.1 * self.a
        if np.isfinite(excess) and excess > 0:
            a = min(max(-self.slope * self.a ** 2 / (2.0 * excess), 0.1 * self.a),
                    0.5 * self.a)
        step_norm = a * float(np.linalg.norm(self.d))
        if step_norm <= 1e-14 * (1.0 + float(np.linalg.norm(self.x))):
            self.pairs.clear()
            self.d = -self.g / self.lipschitz
            self.slope = float(self.g @ self.d)
            a = 1.0
        self.a = a
        return self.x + self.a * self.d

    def restart(self, u: np.ndarray, f: float, g: np.ndarray, exact: bool = True
                ) -> np.ndarray:
        """Take the value ``f`` and gradient ``g`` at a point ``u`` the line search did not
        ask for (θ moved by other means since: gradient steps on partial aggregates, a
        roll-back); return the next point to evaluate.

        ``u`` becomes the iterate without an Armijo test (it is not on the searched line, so
        there is nothing to test it against): its ``f`` is the new reference of the line
        search.  The pair ``(u − x_k, ∇f(u) − ∇f(x_k))`` of the last iterate x_k joins the
        memory when it is a curvature pair of the objective (:meth:`_accept`); older pairs
        age out as usual (``memory``).  ``exact`` as in :meth:`step`.  A non-finite ``f``
        is not taken as the reference: ``u`` is rejected, as in :meth:`step`.
        """
        if not np.isfinite(f):
            return self._reject(u, f)
        return self._accept(u, f, g, exact)

    def _keep(self, s: np.ndarray, y: np.ndarray, exact: bool) -> bool:
        """Whether ``(s, y)`` is a curvature pair to keep.  Between two exact evaluations
        ``sᵀy > 0`` (up to round-off) suffices: both gradients are of one function, so it is
        a true secant pair however ``u`` was reached.  With an estimate at either end, y
        also subtracts two samples' noise: the pair is kept only where its curvature is
        one the objective can have, ``sᵀy ≥ MU·L·|s|²`` and ``yᵀy ≤ CAP·L·sᵀy`` (L =
        ``lipschitz``), which bounds its own curvature (H₀ of it within [1/(CAP·L),
        1/(MU·L)]), not the H of several such pairs (class notes); a pair of nearly
        orthogonal s and y (noise) would otherwise scale the next step by ``sᵀy / yᵀy``'s
        inverse and send it far off (an orthogonal pair with cosine 0.002 made a step 13
        long and the objective +1,120 %)."""
        sy, ss, yy = float(s @ y), float(s @ s), float(y @ y)
        if exact:
            return sy > 1e-10 * float(np.linalg.norm(s) * np.linalg.norm(y))  # as before
        return sy >= self.MU * self.lipschitz * ss and yy <= self.CAP * self.lipschitz * sy

    def _accept(self, u: np.ndarray, f: float, g: np.ndarray, exact: bool) -> np.ndarray:
        u = np.array(u, dtype=np.float64)
        g = np.asarray(g)
        move = 0.0
        # The first exact evaluation after an estimate keeps the screened pairs with an
        # estimated end, and the pair across the switch is screened as one of them; the
        # next exact one drops them (class notes, "Estimated pairs").
        if self.x is not None and self.g is not None:
            s, y = u - self.x, g - self.g
            move = float(np.linalg.norm(s))
            both = exact and self.exact
            if both:  # they steered the first exact step after the estimate: enough
                self._drop_estimated()
            if self._keep(s, y, both):
                self.pairs.append((s, y, 1.0 / float(s @ y), both))
        self.x, self.f, self.g, self.exact = u, float(f), g, exact
        self.accepted = True
        return self._direction(move)

    def _drop_estimated(self) -> None:
        """Forget the pairs with an estimated end (class notes, "Estimated pairs")."""
        self.pairs = deque((p for p in self.pairs if p[3]), maxlen=self.pairs.maxlen)

    def _direction(self, move: float) -> np.ndarray:
        """Set the search direction at the iterate from the memory (steepest descent if it
        is not a descent direction) and return the first point along it.  An estimated
        iterate's step, or one that estimated pairs steer (``steered``), is at most
        ``GROWTH`` times ``move`` (the last move) or ``|∇f| / L``."""
        assert self.x is not None and self.g is not None
        d = -self._two_loop(self.g)
        slope = float(self.g @ d)
        if not slope < 0:
            self.pairs.clear()
            d = -self.g / self.lipschitz
            slope = float(self.g @ d)
        self.steered = self.exact and not all(p[3] for p in self.pairs)
        if not self.exact or self.steered:
            reach = max(self.GROWTH * move,
                        float(np.linalg.norm(self.g)) / self.lipschitz)
            length = float(np.linalg.norm(d))
            if length > reach:
                d *= reach / length
                slope *= reach / length
        self.d, self.slope, self.a = d, slope, 1.0
        return self.x + d

    def _two_loop(self, g: np.ndarray) -> np.ndarray:
        """H·g by the two-loop recursion (Nocedal & Wright, Algorithm 7.4); H₀ = γI with
        γ = sᵀy / yᵀy of the newest pair, or 1/lipschitz without pairs."""
        q = g.copy()
        alphas = []
        for s, y, rho, _ in reversed(self.pairs):
            a = rho * float(s @ q)
            alphas.append(a)
            q -= a * y
        if self.pairs:
            s, y, rho, _ = self.pairs[-1]
            q *= 1.0 / (rho * float(y @ y))
        else:
            q /= self.lipschitz
        for (s, y, rho, _), a in zip(self.pairs, reversed(alphas)):
            b = rho * float(y @ q)
            q += (a - b) * s
        return q
