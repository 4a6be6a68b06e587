"""Random number operators: ``fn.random.coin_flip``, ``uniform``, ``normal``, ``beta``, ``choice``.

Values are drawn per sample from the operator's seeded generator (derived from the pipeline's ``seed`` and the
operator's place in the graph, or its own ``seed=``): the same seed gives the same values on every run, with
any ``num_threads``, on the CPU and the GPU. The values are drawn on the host and, for ``device='gpu'``, copied.
Give an input to draw one value per element of it (``shape_like``), as DALI does.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from sluice import types
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema

_SHAPE = Arg("shape", "int_list", None, "Shape of each sample's output; default: a scalar (or the shape of the "
           "shape_like input).", per_sample=True)


def _shapes(ctx: BatchContext, like: Batch | None, args: BatchArgs) -> list[tuple[int, ...]]:
    """Each sample's output shape: the ``shape_like`` input's, else the ``shape`` argument's (per sample)."""
    if like is not None:
        return [tuple(s) for s in like.shape()]
    return [tuple(int(d) for d in np.asarray(v).reshape(-1)) if v is not None else () for v in args["shape"]]


def _draw(ctx: BatchContext, inputs: tuple[Batch, ...], args: BatchArgs, draw: Any, dtype: types.DALIDataType
          ) -> Batch:
    """``draw(rng, shape, sample_args)`` -> ndarray, for each sample. Uniform shapes draw in one call."""
    shapes = _shapes(ctx, inputs[0] if inputs else None, args)
    n = len(shapes)
    np_type = types.to_numpy_dtype(dtype)
    if n and all(s == shapes[0] for s in shapes) and all(args.is_const(k) for k in args.names()):
        values = np.asarray(draw(ctx.rng, (n, *shapes[0]), args.sample(0))).astype(np_type)
        out = Batch.from_dense(torch.from_numpy(values))
    else:
        out = Batch([torch.from_numpy(np.asarray(draw(ctx.sample_rng(i, reuse=True), shapes[i], args.sample(i))).astype(np_type))
                     for i in range(n)])
    return out.to(ctx.device) if ctx.device.type == "cuda" else out


COIN_FLIP = OpSchema(
    "random.coin_flip",
    doc="""1 with probability ``probability``, else 0, per sample.

    Example::

        mirror = fn.random.coin_flip(probability=0.5)
        images = fn.crop_mirror_normalize(images, mirror=mirror)
    """,
    inputs=(0, 1),
    devices=("cpu", "gpu"),
    random=True,
    args=[
        Arg("probability", float, 0.5, "Probability of a 1.", per_sample=True),
        _SHAPE,
        Arg("dtype", types.DALIDataType, types.INT32, "Output type."),
    ],
    output_layout="",
)


def _coin(rng: np.random.Generator, shape: tuple, a: dict[str, Any]) -> np.ndarray:
    p = a["probability"]
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"probability must be in [0, 1], got {p}")
    return rng.random(shape) < p


@COIN_FLIP.batch_kernel("cpu")
@COIN_FLIP.batch_kernel("gpu")
def coin_flip(ctx: BatchContext, *inputs: Batch, args: BatchArgs) -> Batch:
    return _draw(ctx, inputs, args, _coin, args.const("dtype"))


UNIFORM = OpSchema(
    "random.uniform",
    doc="""Values uniformly distributed in ``range`` = [lo, hi), or drawn from the discrete ``values``.

    Example::

        angle = fn.random.uniform(range=[-10.0, 10.0])
    """,
    inputs=(0, 1),
    devices=("cpu", "gpu"),
    random=True,
    args=[
        Arg("range", "float_list", [-1.0, 1.0], "The interval [lo, hi).", per_sample=True),
        Arg("values", "float_list", None, "Discrete values to choose from with equal probability.", per_sample=True),
        _SHAPE,
        Arg("dtype", types.DALIDataType, types.FLOAT, "Output type."),
    ],
    output_layout="",
)


def _uniform(rng: np.random.Generator, shape: tuple, a: dict[str, Any]) -> np.ndarray:
    if a["values"] is not None:
        values = np.asarray(a["values"], np.float64)
        if values.size == 0:
            raise ValueError("'values' is empty")
        return values[rng.integers(0, values.size, size=shape)]
    lo, hi = (list(a["range"]) + [None])[:2]
    if hi is None or lo > hi:
        raise ValueError(f"range must be [lo, hi] with lo <= hi, got {a['range']}")
    return lo + rng.random(shape) * (hi - lo)


@UNIFORM.batch_kernel("cpu")
@UNIFORM.batch_kernel("gpu")
def uniform(ctx: BatchContext, *inputs: Batch, args: BatchArgs) -> Batch:
    return _draw(ctx, inputs, args, _uniform, args.const("dtype"))


NORMAL = OpSchema(
    "random.normal",
    doc="""Normally distributed values.

    Example::

        noise = fn.random.normal(images, stddev=0.1)   # one value per element of images
    """,
    inputs=(0, 1),
    devices=("cpu", "gpu"),
    random=True,
    args=[
        Arg("mean", float, 0.0, "Mean.", per_sample=True),
        Arg("stddev", float, 1.0, "Standard deviation.", per_sample=True),
        _SHAPE,
        Arg("dtype", types.DALIDataType, types.FLOAT, "Output type."),
    ],
    output_layout="",
)


def _normal(rng: np.random.Generator, shape: tuple, a: dict[str, Any]) -> np.ndarray:
    if a["stddev"] < 0:
        raise ValueError(f"stddev must be >= 0, got {a['stddev']}")
    return a["mean"] + a["stddev"] * rng.standard_normal(shape)


@NORMAL.batch_kernel("cpu")
@NORMAL.batch_kernel("gpu")
def normal(ctx: BatchContext, *inputs: Batch, args: BatchArgs) -> Batch:
    return _draw(ctx, inputs, args, _normal, args.const("dtype"))


BETA = OpSchema(
    "random.beta",
    doc="""Values in [0, 1] following the beta distribution of ``alpha`` and ``beta`` (NumPy's
    ``Generator.beta``), in float32 or float64.

    Example::

        lam = fn.random.beta(alpha=0.4, beta=0.4)    # a mixup weight per sample
    """,
    inputs=(0, 1),
    devices=("cpu", "gpu"),
    random=True,
    input_names=["shape_like"],
    args=[
        Arg("alpha", float, 1.0, "The alpha parameter (positive).", per_sample=True),
        Arg("beta", float, 1.0, "The beta parameter (positive).", per_sample=True),
        _SHAPE,
        Arg("dtype", types.DALIDataType, None, "Output type: FLOAT (default) or FLOAT64.",
            choices=(types.FLOAT, types.FLOAT64)),
    ],
    output_layout="",
)


def _beta(rng: np.random.Generator, shape: tuple, a: dict[str, Any]) -> np.ndarray:
    if not (a["alpha"] > 0 and a["beta"] > 0):
        raise ValueError(f"alpha and beta must be positive, got alpha={a['alpha']}, beta={a['beta']}")
    return rng.beta(a["alpha"], a["beta"], size=shape)


@BETA.batch_kernel("cpu")
@BETA.batch_kernel("gpu")
def beta(ctx: BatchContext, *inputs: Batch, args: BatchArgs) -> Batch:
    return _draw(ctx, inputs, args, _beta, args.const("dtype") or types.FLOAT)


CHOICE = OpSchema(
    "random.choice",
    doc="""Draws from the input: an integer ``n`` draws from 0..n-1, a 1-D tensor draws among its elements.

    Example::

        size = fn.random.choice([224, 256, 288], p=[0.25, 0.5, 0.25])
    """,
    inputs=(1, 2),
    devices=("cpu",),
    random=True,
    input_names=["a", "shape_like"],
    args=[
        Arg("p", "float_list", None, "Probabilities of the choices; default: equal.", per_sample=True),
        _SHAPE,
    ],
    output_layout="",
)


@CHOICE.batch_kernel("cpu")
def choice(ctx: BatchContext, a: Batch, shape_like: Batch | None = None, *, args: BatchArgs) -> Batch:
    shapes = _shapes(ctx, shape_like, args)
    out = []
    for i, sample in enumerate(a):
        arr = sample.numpy()
        pool = np.arange(int(arr)) if arr.ndim == 0 else arr.reshape(-1)
        if pool.size == 0:
            raise ValueError("cannot choose from an empty set")
        p = args["p"][i]
        if p is not None:
            p = np.asarray(p, np.float64)
            if p.size != pool.size or np.any(p < 0) or not np.isclose(p.sum(), 1.0):
                raise ValueError(f"p must have {pool.size} non-negative entries summing to 1, got {p.tolist()}")
        idx = ctx.sample_rng(i, reuse=True).choice(pool.size, size=shapes[i], p=p)
        out.append(torch.from_numpy(np.asarray(pool[idx])))
    return Batch(out)
