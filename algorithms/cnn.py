"""A small convolutional network trained by mini-batch SGD (FSP paper Section 2.1, Eq. 1;
Table 1: CNN, footnote 3: two convolutional layers with 6 and 12 kernels of 5×5).

Architecture: ``[conv k×k → ReLU → pool]`` per entry of ``n_filters`` (default two layers, 6
and 12 kernels), then a dense softmax layer.  Each image (a flattened row) is a data point;
the points processed between two barriers are the mini-batch of Eq. (1): a delta holds the
summed gradients and the count, and the M-step takes ``θ ← θ − η (Σ_B ∇F_i / |B| + α w)``
(optionally with momentum, whose velocity lives in θ).

One code path for CPU and GPU: every kernel takes an array module ``xp`` (NumPy, or CuPy when
``device="gpu"``).  Convolutions are im2col (a strided view copied once) + one GEMM per layer
for the output and the kernel gradient; the input gradient is one small GEMM per kernel offset
scatter-added onto the shifted window; pooling combines the p² strided sub-grids.  The only
Python loops run over layers, kernel/pooling offsets and chunks of images, never over images.
θ stays a dict of NumPy float64 arrays at the API boundary.  On a GPU the parameters stay on
the device between blocks: they are copied there (in the compute dtype) only when θ changed,
which happens only at a barrier (:class:`~algorithms._common.ThetaCache` tells by identity);
each block copies its images in and its gradients and losses out.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from flegel import Algorithm, Block, DataInfo
from flegel.device import DeviceKernels, to_host
from flegel.validation import AnyOf, Described, Integer, Items, Nullable, Options, Real

from ._common import (
    DEVICE_PARAMS,
    InitSpec,
    RowKernel,
    ThetaCache,
    expect_shape,
    learning_rate_at,
    load_init_arrays,
    logsumexp_rows,
    resolve_init_path,
    set_params,
    validate_init_file,
)

_POOLINGS = ("max", "avg")
_SCHEDULES = ("constant", "invscaling")
_DTYPES = ("float32", "float64")
_INITS = ("he",)
_MAX_LAYERS = 64


def _to_host(a: Any) -> np.ndarray:
    """A NumPy float64 array of a NumPy or CuPy array (:func:`flegel.device.to_host`)."""
    return np.asarray(to_host(a), dtype=np.float64)


# ---------------------------------------------------------------------- layer kernels (xp)
def _im2col(xp: Any, a: Any, k: int) -> Any:
    """Patches of an NHWC batch: (B·Ho·Wo, k·k·C), column order (kh, kw, c)."""
    a = xp.ascontiguousarray(a)
    b, h, w, c = a.shape
    ho, wo = h - k + 1, w - k + 1
    s0, s1, s2, s3 = a.strides
    view = xp.lib.stride_tricks.as_strided(a, shape=(b, ho, wo, k, k, c),
                                           strides=(s0, s1, s2, s1, s2, s3))
    return view.reshape(b * ho * wo, k * k * c)


def _conv_input_grad(xp: Any, dz: Any, wt: Any, shape: tuple[int, int, int, int]) -> Any:
    """Gradient w.r.t. the (padded) input of a convolution, the adjoint of im2col + GEMM.

    ``dz`` is the output gradient (B·Ho·Wo, F) and ``wt`` the kernels (k, k, C, F).  One small
    GEMM per kernel offset, (B·Ho·Wo, F) @ (F, C), scatter-added onto the shifted window:
    contiguous sources, no (B·Ho·Wo, k·k·C) buffer.
    """
    b, h, w, c = shape
    k = wt.shape[0]
    ho, wo = h - k + 1, w - k + 1
    out = xp.zeros(shape, dtype=dz.dtype)
    for i in range(k):  # loop over kernel offsets, vectorized over images
        for j in range(k):
            out[:, i:i + ho, j:j + wo, :] += (dz @ wt[i, j].T).reshape(b, ho, wo, c)
    return out


def _pool_forward(xp: Any, a: Any, p: int, mode: str) -> Any:
    """p×p pooling with stride p of an NHWC batch (trailing rows/columns dropped): an
    elementwise max (or sum) of the p² strided sub-grids."""
    hp, wp = a.shape[1] // p, a.shape[2] // p
    out: Any = None
    for di in range(p):
        for dj in range(p):
            v = a[:, di:hp * p:p, dj:wp * p:p, :]
            if out is None:
                out = v.copy()
            elif mode == "max":
                xp.maximum(out, v, out=out)
            else:
                out += v
    if mode == "avg" and p > 1:
        out *= 1.0 / (p * p)
    return out


def _pool_backward(xp: Any, dout: Any, a: Any, out: Any, p: int, mode: str) -> Any:
    """Gradient of :func:`_pool_forward` w.r.t. its input ``a`` (max: to the arg-max
    positions; ties, e.g. windows of ReLU zeros, all receive it)."""
    hp, wp = out.shape[1], out.shape[2]
    grad = xp.zeros(a.shape, dtype=dout.dtype)
    share = dout if mode == "max" else dout * (1.0 / (p * p))
    for di in range(p):
        for dj in range(p):
            sub = (slice(None), slice(di, hp * p, p), slice(dj, wp * p, p))
            grad[sub] = (a[sub] == out) * share if mode == "max" else share
    return grad


class CNN(DeviceKernels, RowKernel, Algorithm):
    """Convolutional network classifier (conv-ReLU-pool layers + softmax) by mini-batch SGD.

    FSP paper Section 2.1 (Eq. 1) and Table 1 (CNN; footnote 3 gives the default layers).

    Parameters
    ----------
    image_shape : tuple of int or None, default=None
        ``(H, W)`` or ``(H, W, C)`` (channels last) of the images, which are stored as
        flattened rows.  None: square single-channel images, side ``sqrt(n_features)``
        (28×28 for MNIST).
    n_filters : sequence of int, default=(6, 12)
        Kernels of each convolutional layer (one layer per entry; empty: none, a softmax
        layer on the pixels).
    kernel_size : int, default=5
        Side of the square convolution kernels.
    padding : int, default=0
        Zeros added on each side before every convolution ("valid" when 0).
    pool_size : int, default=2
        Side and stride of the pooling windows after each convolution (1: no pooling).
    pooling : {"max", "avg"}, default="max"
    learning_rate : float, default=0.05
        Step size η₀ (> 0).
    schedule : {"constant", "invscaling"}, default="constant"
        ``invscaling``: η_t = η₀ / t^power_t, t the number of updates so far.
    power_t : float, default=0.5
    momentum : float, default=0.0
        Heavy-ball momentum in [0, 1); 0 is plain Eq. (1).  The velocities are kept in θ
        (``v_<name>``), so they double the size of θ.
    alpha : float, default=0.0
        L2 weight decay on kernels and dense weights (not biases); per-point loss then carries
        ``(α/2)‖w‖²`` as in :class:`~algorithms.logreg.LogisticRegression`.
    input_scale : "auto" or float, default="auto"
        Factor applied to the pixels first.  ``"auto"``: 1 / the largest absolute value in the
        job's data sample (1/255 for raw MNIST bytes, 1 for pixels in [0, 1]), so the fixed
        step size suits the data whatever its scale; kept in θ and the saved model as
        ``input_scale``.  A number is used as given.
    device : {"cpu", "gpu", "auto"}, default="cpu"
        Where the kernels run: NumPy, or CuPy on the current CUDA device (``"auto"``: the GPU
        when CuPy and a device are present, else the CPU, said once on standard error).
        ``"gpu"`` without them fails when the job is validated, in one line
        (:mod:`flegel.device`).  On a GPU θ stays on the device until it changes.
    dtype : {"float32", "float64"}, default="float32"
        Compute precision of the kernels (θ and gradients are float64 at the API boundary).
    chunk_size : int or None, default=None
        Images per forward/backward pass inside a block (bounds the im2col buffers); None:
        256 on the CPU, 4096 on a GPU (fewer, larger kernel launches).
    init : "he" or path, default="he"
        θ⁽⁰⁾: He-normal kernels and dense weights, zero biases; or a warm start: a run
        directory of a CNN run (or its ``model.npz``) with the same layers (relative to the
        job file's folder).  Momentum velocities start at zero either way.

    Notes
    -----
    θ: ``conv{l}_w`` (k, k, C_in, F) and ``conv{l}_b`` (F,) for l = 1, 2, ..., ``dense_w``
    (D, n_classes), ``dense_b``, ``step`` and, with momentum, the ``v_*`` velocities.  The
    objective is the summed cross-entropy (plus the weight-decay share when ``alpha > 0``);
    the per-point loss is kept in state so deltas are exact changes.  Labels are 0..C−1 with
    C = ``info.n_classes``.

    Each barrier is one step on the mean gradient of the points since the last (Eq. 1), so
    progress comes per step, not per point (``progress_per_update``): under FSPV the
    interval is the shortest its probes allow.  Measured (issue 19, ``python
    bench/paper_pairs.py``, ``flegel paper``'s 2,000 images on label-sorted shards, 4
    workers): FSPV with fixed intervals of 10 and 80 ms reached the target in 0.78 s and
    1.49 s, BSPV in 1.67 s.
    """

    #: update_parameter returns new arrays: the master passes θ without a copy.
    updates_theta_in_place = False

    name = "cnn"
    needs_labels = True
    label_kind = "classes"
    objective_name = "cross-entropy"
    progress_per_update = True
    # The parameters, as set_params stores them from PARAMS.
    image_shape: tuple[int, ...] | None
    n_filters: tuple[int, ...]
    kernel_size: int
    padding: int
    pool_size: int
    pooling: str
    learning_rate: float
    schedule: str
    power_t: float
    momentum: float
    alpha: float
    input_scale: Any
    dtype: str
    chunk_size: int | None
    init: str
    PARAMS = {
        "image_shape": Nullable(Described(Items(Integer(lo=1), sizes=(2, 3)),
                                          "(H, W), (H, W, C)")),
        # Empty: no convolutional layer, a softmax layer on the pixels (the estimator fits
        # that when an inferred image is too small for any layer).
        "n_filters": Described(Items(Integer(lo=1), sizes=tuple(range(_MAX_LAYERS + 1))),
                               f"a list of at most {_MAX_LAYERS} positive integers"),
        "kernel_size": Integer(lo=1),
        "padding": Integer(lo=0),
        "pool_size": Integer(lo=1),
        "pooling": Options(_POOLINGS),
        "learning_rate": Real(lo=0.0, lo_open=True, finite=True),
        "schedule": Options(_SCHEDULES),
        "power_t": Real(lo=0.0, finite=True),
        "momentum": Real(lo=0.0, hi=1.0, hi_open=True, finite=True),
        "alpha": Real(lo=0.0, finite=True),
        "input_scale": AnyOf(Options(("auto",)), Real(lo=0.0, lo_open=True, finite=True)),
        "device": DEVICE_PARAMS["device"],
        "dtype": Options(_DTYPES),
        "chunk_size": Nullable(Integer(lo=1)),
        "init": InitSpec(_INITS),
    }

    def __init__(self, image_shape: Sequence[int] | None = None,
                 n_filters: Sequence[int] = (6, 12), kernel_size: int = 5, padding: int = 0,
                 pool_size: int = 2, pooling: str = "max", learning_rate: float = 0.05,
                 schedule: str = "constant", power_t: float = 0.5, momentum: float = 0.0,
                 alpha: float = 0.0, input_scale: Any = "auto", device: str = "cpu",
                 dtype: str = "float32", chunk_size: int | None = None,
                 init: str = "he") -> None:
        super().__init__()
        set_params(self, locals())
        # no ``kernel`` parameter: the CNN has one kernel, the array one, on either device
        self._set_device(device)
        self._params = ThetaCache[dict[str, Any]]()

    # ------------------------------------------------------------------ geometry and set-up
    def validate(self, base_dir: Path) -> None:
        self.check_device()
        validate_init_file(self.init, base_dir, _INITS, "dense_w", None, self)

    def _chunks(self, xp: Any, n: int) -> Iterator[slice]:
        size = self.chunk_size or (256 if xp is np else 4096)
        for start in range(0, n, size):
            yield slice(start, min(n, start + size))

    def _image_hwc(self, n_features: int) -> tuple[int, int, int]:
        if self.image_shape is None:
            side = math.isqrt(n_features)
            if side * side != n_features:
                raise ValueError(f"CNN: {n_features} features are not a square image; "
                                 "set image_shape=(H, W) or (H, W, C)")
            return side, side, 1
        h, w, c = (*self.image_shape, 1)[:3]
        if h * w * c != n_features:
            raise ValueError(f"CNN: image_shape={self.image_shape} has {h * w * c} values but "
                             f"the data have {n_features} features")
        return h, w, c

    def layer_shapes(self, n_features: int) -> list[tuple[int, int, int]]:
        """(H, W, C) of the input and of each pooled layer output; checks that all fit."""
        h, w, c = self._image_hwc(n_features)
        shapes = [(h, w, c)]
        k, pad, p = self.kernel_size, self.padding, self.pool_size
        for n, f in enumerate(self.n_filters, start=1):
            ho, wo = h + 2 * pad - k + 1, w + 2 * pad - k + 1
            if ho < 1 or wo < 1 or ho // p < 1 or wo // p < 1:
                raise ValueError(f"CNN: layer {n} gets a {h}×{w} input, too small for "
                                 f"kernel_size={k}, padding={pad}, pool_size={p}")
            h, w, c = ho // p, wo // p, f
            shapes.append((h, w, c))
        return shapes

    def init_parameter(self, info: DataInfo) -> dict[str, np.ndarray]:
        if info.n_classes is None:
            raise ValueError("CNN needs labelled data (a label column)")
        n_classes = max(int(info.n_classes), 2)
        shapes = self.layer_shapes(info.n_features)
        rng = np.random.default_rng(info.seed)
        k = self.kernel_size
        theta: dict[str, np.ndarray] = {}
        for n, ((_, _, cin), f) in enumerate(zip(shapes, self.n_filters), start=1):
            std = math.sqrt(2.0 / (k * k * cin))  # He initialization for ReLU
            theta[f"conv{n}_w"] = rng.normal(0.0, std, size=(k, k, cin, f))
            theta[f"conv{n}_b"] = np.zeros(f)
        d = int(np.prod(shapes[-1]))
        theta["dense_w"] = rng.normal(0.0, math.sqrt(1.0 / d), size=(d, n_classes))
        theta["dense_b"] = np.zeros(n_classes)
        path = resolve_init_path(self.init, info.base_dir, _INITS)
        if path is not None:
            arrays = load_init_arrays(path, "dense_w", self)
            job = f"cnn with n_filters={list(self.n_filters)} and {n_classes} classes"
            for key in list(theta):
                if key not in arrays:
                    raise ValueError(f"init: {path} holds no {key!r} (found {sorted(arrays)}), "
                                     f"but {job} needs it")
                theta[key] = expect_shape(path, key, arrays[key], theta[key].shape, job)
        if self.momentum > 0.0:
            for key in list(theta):
                theta[f"v_{key}"] = np.zeros_like(theta[key])
        theta["step"] = np.zeros(1)
        theta["input_scale"] = np.array([self._resolve_scale(info.sample)])
        return theta

    def _resolve_scale(self, sample: np.ndarray) -> float:
        """``input_scale`` as a number: ``"auto"`` is 1 / max |x| over the data sample."""
        if self.input_scale != "auto":
            return float(self.input_scale)
        x = np.asarray(sample, dtype=np.float64)
        top = float(np.max(np.abs(x))) if x.size else 0.0
        return 1.0 / top if top > 0 and np.isfinite(top) else 1.0

    def _scale(self, theta: dict[str, np.ndarray]) -> float:
        """The input scale of θ (a θ or model saved before it was kept: the parameter)."""
        if "input_scale" in theta:
            return float(np.asarray(theta["input_scale"]).ravel()[0])
        return 1.0 if self.input_scale == "auto" else float(self.input_scale)

    def init_state(self, n: int, n_features: int) -> dict[str, np.ndarray]:
        return {"loss": np.zeros(n)}

    @staticmethod
    def _param_keys(theta: dict[str, np.ndarray]) -> list[str]:
        return [k for k in theta if k not in ("step", "input_scale") and not k.startswith("v_")]

    def zero_aggregator(self, theta: dict[str, np.ndarray]) -> dict:
        agg: dict[str, Any] = {f"grad_{k}": np.zeros_like(theta[k])
                               for k in self._param_keys(theta)}
        agg["count"] = 0.0
        agg["objective"] = 0.0
        return agg

    # ------------------------------------------------------------------ kernels
    def _penalty(self, theta: dict[str, np.ndarray]) -> float:
        if self.alpha == 0.0:
            return 0.0
        return 0.5 * self.alpha * sum(float(np.vdot(theta[k], theta[k]))
                                      for k in self._param_keys(theta) if k.endswith("_w"))

    def _device_params(self, xp: Any, theta: dict[str, np.ndarray]) -> dict[str, Any]:
        """θ's layer parameters on ``xp``'s device in the compute dtype, copied there only
        when θ changed since the last call (:class:`~algorithms._common.ThetaCache`: θ
        changes only at a barrier, as a new dict of new arrays).  The kernels never write
        into them."""
        return self._params.get(theta, lambda th: {
            k: xp.asarray(th[k], dtype=self.dtype) for k in self._param_keys(th)})

    def _forward(self, xp: Any, params: dict[str, Any], x: Any, y: Any | None,
                 grads: dict[str, Any] | None, scale: float = 1.0) -> tuple[Any, Any]:
        """Forward pass of a chunk ``x`` (B × n_features) on ``xp``; returns the per-image
        cross-entropy (None without labels) and the logits.  With ``grads``, backpropagates
        and adds the summed gradients into it (float64, on ``xp``)."""
        n_layers = len(self.n_filters)
        k, pad, p = self.kernel_size, self.padding, self.pool_size
        h, w, c = self._image_hwc(x.shape[1])
        a = x.reshape(x.shape[0], h, w, c)
        if scale != 1.0:
            a = a * scale
        caches = []
        for n in range(1, n_layers + 1):
            if pad:
                a = xp.pad(a, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
            wt = params[f"conv{n}_w"]
            f = wt.shape[-1]
            cols = _im2col(xp, a, k)
            z = cols @ wt.reshape(-1, f)
            z += params[f"conv{n}_b"]
            xp.maximum(z, 0.0, out=z)
            bsz, hp, wp, _ = a.shape
            z = z.reshape(bsz, hp - k + 1, wp - k + 1, f)
            pooled = _pool_forward(xp, z, p, self.pooling)
            caches.append((a.shape, cols, z, pooled))
            a = pooled
        flat = a.reshape(a.shape[0], -1)
        logits = flat @ params["dense_w"]
        logits += params["dense_b"]
        if y is None:
            return None, logits
        rows = xp.arange(len(y))
        lse = logsumexp_rows(logits)
        loss = lse - logits[rows, y]
        if grads is None:
            return loss, logits
        dlog = xp.exp(logits - lse[:, None])
        dlog[rows, y] -= 1.0
        grads["dense_w"] += (flat.T @ dlog).astype(xp.float64)
        grads["dense_b"] += dlog.sum(axis=0).astype(xp.float64)
        da = (dlog @ params["dense_w"].T).reshape(a.shape)
        for n in range(n_layers, 0, -1):
            shape_in, cols, z, pooled = caches[n - 1]
            dz = _pool_backward(xp, da, z, pooled, p, self.pooling)
            dz *= z > 0
            wt = params[f"conv{n}_w"]
            f = wt.shape[-1]
            dz = dz.reshape(-1, f)
            grads[f"conv{n}_w"] += (cols.T @ dz).reshape(wt.shape).astype(xp.float64)
            grads[f"conv{n}_b"] += dz.sum(axis=0).astype(xp.float64)
            if n > 1:
                da = _conv_input_grad(xp, dz, wt, shape_in)
                if pad:
                    da = da[:, pad:-pad, pad:-pad, :]
        return loss, logits

    def _update_rows(self, block: Block, theta: dict[str, np.ndarray], t: int) -> dict:
        """The vectorized kernel of a block; both hooks run it (one piece of math)."""
        if block.y is None:
            raise ValueError("CNN needs labelled data (a label column)")
        xp = self.xp
        params = self._device_params(xp, theta)
        grads = {k: xp.zeros(v.shape, dtype=xp.float64) for k, v in params.items()}
        n_classes = theta["dense_b"].shape[0]
        y_all = np.asarray(block.y).astype(np.int64)
        if len(y_all) and (y_all.min() < 0 or y_all.max() >= n_classes):
            raise ValueError(f"CNN: labels must be integers in [0, {n_classes - 1}]")
        losses = np.empty(len(block))
        for sl in self._chunks(xp, len(block)):
            x = xp.asarray(block.x[sl], dtype=self.dtype)
            loss, _ = self._forward(xp, params, x, xp.asarray(y_all[sl]), grads,
                                    self._scale(theta))
            losses[sl] = _to_host(loss)
        losses += self._penalty(theta)
        old = block.state["loss"]
        dobj = float(losses.sum() - old.sum())
        old[...] = losses
        agg: dict[str, Any] = {f"grad_{k}": _to_host(g) for k, g in grads.items()}
        agg["count"] = float(len(block))
        agg["objective"] = dobj
        return agg

    def update_parameter(self, agg: dict, theta: dict[str, np.ndarray]) -> dict:
        count = float(agg["count"])
        if count <= 0.0:
            return dict(theta)
        new = dict(theta)
        step = theta["step"] + 1.0
        eta = learning_rate_at(self.learning_rate, self.schedule, self.power_t, float(step[0]))
        for key in self._param_keys(theta):
            g = agg[f"grad_{key}"] / count
            if self.alpha and key.endswith("_w"):
                g = g + self.alpha * theta[key]
            if self.momentum > 0.0:
                v = self.momentum * theta[f"v_{key}"] - eta * g
                new[f"v_{key}"] = v
                new[key] = theta[key] + v
            else:
                new[key] = theta[key] - eta * g
        new["step"] = step
        return new

    def evaluate(self, theta: dict[str, np.ndarray], block: Block) -> float:
        xp = self.xp
        params = self._device_params(xp, theta)
        assert block.y is not None  # needs_labels: the job check guarantees labelled data
        total = 0.0
        for sl in self._chunks(xp, len(block)):
            x = xp.asarray(block.x[sl], dtype=self.dtype)
            y = xp.asarray(np.asarray(block.y[sl]).astype(np.int64))
            loss, _ = self._forward(xp, params, x, y, None, self._scale(theta))
            total += float(_to_host(loss).sum())
        return total + len(block) * self._penalty(theta)

    # ------------------------------------------------------------------ helpers
    def decision_function(self, theta: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
        """Logits (n × C) of the images (rows) of ``x``."""
        xp = self.xp
        params = self._device_params(xp, theta)
        out = np.empty((len(x), theta["dense_b"].shape[0]))
        for sl in self._chunks(xp, len(x)):
            _, logits = self._forward(xp, params, xp.asarray(x[sl], dtype=self.dtype), None,
                                      None, self._scale(theta))
            out[sl] = _to_host(logits)
        return out

    def predict_proba(self, theta: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
        """Class probabilities (n × C) of the images (rows) of ``x``."""
        z = self.decision_function(theta, x)
        return np.exp(z - logsumexp_rows(z)[:, None])

    def predict(self, theta: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
        """Predicted label of each image (row) of ``x``."""
        return self.decision_function(theta, x).argmax(axis=1)

    def evaluate_accuracy(self, theta: dict[str, np.ndarray], x: np.ndarray,
                          y: np.ndarray) -> float:
        """Fraction of the images of ``x`` whose predicted label equals ``y``."""
        return float(np.mean(self.predict(theta, x) == np.asarray(y).astype(np.int64)))

    def finalize(self, theta: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = {k: theta[k] for k in self._param_keys(theta)}
        out["input_scale"] = np.array([self._scale(theta)])
        return out
