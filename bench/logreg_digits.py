"""flegel's default LogisticRegression vs scikit-learn's on raw digits, even vs odd (issue 22).

scikit-learn's digits (pixel values 0..16, not standardised), label = digit parity, 70/30
stratified splits with ``random_state`` 0..4.  Prints the test accuracy of
``flegel.LogisticRegression()`` and ``sklearn.linear_model.LogisticRegression()`` (both with
their defaults) per split, their gap, flegel's iterations and whether it converged, and exits
with status 1 when a gap exceeds 0.02 (the issue's done-when).

Run: ``python bench/logreg_digits.py [--sync bsp|fsp|...] [--splits 5] [--scaled]``.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sync", default=None, help="flegel sync model (default: the estimator's)")
    p.add_argument("--splits", type=int, default=5)
    p.add_argument("--scaled", action="store_true", help="standardise the features first")
    p.add_argument("--max-gap", type=float, default=0.02)
    args = p.parse_args(argv)

    from sklearn.datasets import load_digits
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression as SkLR
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    import flegel

    X, y = load_digits(return_X_y=True)
    y = y % 2
    worst = 0.0
    print(f"{'split':>5} {'flegel':>7} {'sklearn':>7} {'gap':>6} {'iters':>5} converged  time_s")
    for rs in range(args.splits):
        xtr, xte, ytr, yte = train_test_split(X, y, test_size=0.3, stratify=y, random_state=rs)
        if args.scaled:
            scaler = StandardScaler().fit(xtr)
            xtr, xte = scaler.transform(xtr), scaler.transform(xte)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            sk = SkLR().fit(xtr, ytr).score(xte, yte)
            t0 = time.perf_counter()
            est = flegel.LogisticRegression(random_state=0, sync=args.sync).fit(xtr, ytr)
            took = time.perf_counter() - t0
        ours = est.score(xte, yte)
        gap = abs(ours - sk)
        worst = max(worst, gap)
        print(f"{rs:>5} {ours:7.3f} {sk:7.3f} {gap:6.3f} {est.n_iter_:>5} {est.converged_!s:>9} "
              f"{took:7.2f}")
    print(f"largest gap {worst:.3f} (limit {args.max_gap})")
    return 0 if worst <= args.max_gap else 1


if __name__ == "__main__":
    sys.exit(main())
