"""Models a user can load and use: flegel.load on the run directory of a real ``flegel run``
under mpirun, warm starts from it, and clear errors for what is not a model."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

import flegel
from flegel.data import load_shard
from flegel.job.errors import JobError
from flegel.job.validate import load_job
from flegel.rundir.model import model_path, read_model
from tests.conftest import events, mpirun, summary, write_job

pytestmark = pytest.mark.mpi

DATA = {"source": "synthetic", "kind": "blobs", "n_points": 3000, "n_features": 3,
        "centers": 4, "seed": 2}


def _kmeans_job(folder, name: str = "job.yaml", **params):
    return write_job(folder / name, algorithm="kmeans",
                     params={"n_clusters": 4, **params}, data=DATA, workers=2, seed=1,
                     stop={"max_iterations": 50}, output={"progress": "none"})


@pytest.fixture(scope="module")
def kmeans_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("load")
    job = _kmeans_job(folder)
    out = folder / "run"
    mpirun(job, 2, out)
    return folder, job, out


def test_load_returns_a_fitted_kmeans(kmeans_run):
    from sklearn.cluster import KMeans as SkKMeans

    _, job, out = kmeans_run
    km = flegel.load(out)
    assert isinstance(km, flegel.KMeans)
    assert km.run_dir_ == out.resolve()
    assert km.n_clusters == 4 and km.workers == 2 and km.random_state == 1
    s = summary(out)
    assert km.inertia_ == s["final_objective"] and km.n_iter_ == s["iterations"]
    with np.load(out / "model.npz") as archive:
        np.testing.assert_array_equal(km.cluster_centers_, archive["centers"])
    x, _ = load_shard(load_job(job).data, 0, 1, job.parent)
    # scikit-learn's predictions with the same centres
    sk = SkKMeans(4, init=km.cluster_centers_, n_init=1, max_iter=1).fit(x)
    sk.cluster_centers_ = km.cluster_centers_
    np.testing.assert_array_equal(km.predict(x), sk.predict(x))
    assert -km.score(x) == pytest.approx(s["final_objective"], rel=1e-9)
    with pytest.raises(ValueError, match="X has 2 features, but KMeans is expecting 3"):
        km.predict(x[:, :2])
    again = pickle.loads(pickle.dumps(km))  # a loaded estimator travels like any other
    np.testing.assert_array_equal(again.predict(x), km.predict(x))


def test_warm_start_from_the_run_directory(kmeans_run):
    folder, _, out = kmeans_run
    first = summary(out)["final_objective"]
    for init in (str(out), str(out / "model.npz")):
        job = _kmeans_job(folder, "warm.yaml", init=init)
        warm = folder / f"warm-{len(init)}"
        mpirun(job, 2, warm)
        # It starts at the saved optimum: its first iteration already has the final inertia.
        assert events(warm)[0]["objective"] == pytest.approx(first, rel=1e-9)
        assert summary(warm)["final_objective"] == pytest.approx(first, rel=1e-9)


def test_fit_a_job_file_on_arrays_warm_started_by_a_relative_path(kmeans_run):
    """flegel.fit on a job file: its data replaced by X, its relative init still meaning the
    run directory beside it."""
    folder, job, out = kmeans_run
    x, _ = load_shard(load_job(job).data, 0, 1, job.parent)
    warm = _kmeans_job(folder, "relative.yaml", init=out.name)
    est = flegel.fit(warm, x, out=folder / "fits")
    assert isinstance(est, flegel.KMeans) and est.get_params()["init"] == out.name
    assert events(est.run_dir_)[0]["objective"] == pytest.approx(
        summary(out)["final_objective"], rel=1e-9)
    assert not list(folder.glob(".flegel-fit-*"))  # the job file written beside it is gone


def test_warm_start_from_another_algorithm_or_shape_fails_before_work(kmeans_run):
    folder, _, out = kmeans_run
    gmm = write_job(folder / "gmm.yaml", algorithm="gmm",
                    params={"n_components": 4, "init": str(out)}, data=DATA)
    with pytest.raises(JobError, match=r"model of algorithm 'kmeans'.*trains 'gmm'"):
        load_job(gmm)
    other_k = _kmeans_job(folder, "k5.yaml", init=str(out))
    doc = other_k.read_text().replace("n_clusters: 4", "n_clusters: 5")
    other_k.write_text(doc)
    with pytest.raises(JobError, match=r"centers of shape \(4, 3\), but this job needs \(5,"):
        load_job(other_k)


def test_a_directory_without_a_model_gets_a_clear_error(tmp_path, kmeans_run):
    _, _, out = kmeans_run
    run = tmp_path / "unfinished"
    run.mkdir()
    (run / "job.yaml").write_text((out / "job.yaml").read_text())
    with pytest.raises(FileNotFoundError, match="no model found; it is a run directory "
                                                "without model.npz"):
        flegel.load(run)
    with pytest.raises(FileNotFoundError, match="expected a run directory holding model.npz"):
        flegel.load(tmp_path)
    with pytest.raises(ValueError, match="expected a run directory or a model.npz"):
        model_path(out / "job.yaml")
    saved = read_model(out)
    assert saved.algorithm == "kmeans" and saved.params["n_clusters"] == 4
    assert json.loads((out / "model.json").read_text())["arrays"]["centers"]["shape"] == [4, 3]
