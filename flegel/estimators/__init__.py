"""scikit-learn-style estimators over flegel's MPI runtime.

``from flegel import KMeans, GaussianMixture, FuzzyCMeans, LogisticRegression, NMF, CNN``:
each is a :class:`sklearn.base.BaseEstimator` with the right mixins.  Its parameters are the
algorithm's (the job's ``params``) plus the runtime's, beside them:

==============  ==========================================================================
``workers``     worker processes (MPI ranks 1..workers; rank 0 is the master), default 2
``sync``        a sync model name or preset (``"fsp"``, ``"bspv"``) or a ``sync`` mapping
``stragglers``  a list of straggler patterns (the job's ``stragglers``)
``stop``        a mapping of further ``stop`` keys (``target_objective``, ``max_time_s``);
                ``max_iter`` and ``tol`` are ``stop.max_iterations`` and ``stop.tolerance``
``random_state`` the job's ``seed`` (None: a fresh one drawn from NumPy's global RNG)
``out``         folder under which each fit makes its run directory (default: the system's
                temporary folder, ``flegel-runs``)
==============  ==========================================================================

``fit(X, y=None)`` takes the same path as ``flegel run``: it writes ``X`` (and ``y``) to
``.npy`` files in a new run directory with a job file, validates the job, launches
``workers + 1`` MPI ranks with the bundled launcher (:func:`flegel.cli.launch.launch`), then reads
the model back (:mod:`flegel.rundir.model`).  The data files are removed after the run; the run
directory (``run_dir_``) keeps the model, the resolved job, the event log and the summary, so
``flegel.load(est.run_dir_)`` gives the estimator back.  Prediction runs in this process,
vectorized, through the algorithm's own kernels.

Parameters are stored as given (scikit-learn's convention) and validated by ``fit`` with
scikit-learn's messages; fitted attributes end in ``_``.


The modules: :mod:`~flegel.estimators.base` (the conventions every estimator shares),
:mod:`~flegel.estimators.running` (launching a job on in-memory data),
:mod:`~flegel.estimators.clustering`, :mod:`~flegel.estimators.classifiers`,
:mod:`~flegel.estimators.decomposition`, :mod:`~flegel.estimators.generic` (any algorithm)
and :mod:`~flegel.estimators.functional` (:func:`fit` and :func:`load`).
"""

from flegel.estimators.base import FlegelEstimator
from flegel.estimators.classifiers import CNN, LogisticRegression
from flegel.estimators.clustering import FuzzyCMeans, GaussianMixture, KMeans
from flegel.estimators.decomposition import NMF
from flegel.estimators.functional import fit, from_saved, load
from flegel.estimators.generic import Estimator

__all__ = ["CNN", "NMF", "Estimator", "FlegelEstimator", "FuzzyCMeans", "GaussianMixture",
           "KMeans", "LogisticRegression", "fit", "from_saved", "load"]
