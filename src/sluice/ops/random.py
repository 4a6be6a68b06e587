"""Random number operators: ``fn.random.coin_flip``, ``uniform``, ``normal``, ``beta``, ``choice``.

Values are drawn per sample from the operator's seeded generator (derived from the pipeline's ``seed`` and the
operator's place in the graph, or its own ``seed=``): the same seed gives the same values on every run, with
any ``num_threads``, on the CPU and the GPU. Values per sample (scalars, or the ``shape`` argument's) are drawn on
the host and, for ``device='gpu'``, copied. Give an input to draw one value per element of it (``shape_like``), as
DALI does: ``coin_flip``, ``uniform`` and ``normal`` then draw the whole batch on the batch's device in one launch
sequence from :class:`sluice.kernels.counter_rng.CounterRNG` keyed per sample (as ``fn.noise.gaussian`` draws its
noise), so that a volume's noise is neither made element by element on the host nor copied to the GPU.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from sluice import env, types
from sluice.kernels.counter_rng import M32, CounterRNG, sample_keys, stream_key
from sluice.kernels.ragged import per_element, segments
from sluice.pipeline import ragged
from sluice.pipeline.batch import Batch
from sluice.pipeline.pool import share_range
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


#: Elements per piece when the CPU draws a sample's values: temporaries that stay in cache (not 8 bytes an element
#: of the whole volume allocated a dozen times over), and below torch's grain (32768), so that each torch call runs
#: in the pool thread that makes it rather than waking torch's own threads; the pieces are shared by the pool.
_CPU_PIECE = (1 << 15) - 1


class _Spread:
    """Per-sample values spread to the elements being drawn: to every element of the batch (``seg``: each element's
    sample), or, for a piece of sample ``i`` alone (``seg`` None), as that sample's scalars."""

    def __init__(self, seg: torch.Tensor | None, i: int, device: torch.device):
        self.seg, self.i, self.device = seg, i, device

    def __call__(self, values: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
        if self.seg is None:
            return torch.tensor(values[self.i], dtype=dtype, device=self.device)
        return per_element(values, self.seg, dtype)

    def rows(self, table: np.ndarray, column: torch.Tensor) -> torch.Tensor:
        """``table[sample, column]`` of each element (``table``: one row a sample)."""
        if self.seg is None:
            return torch.from_numpy(table[self.i])[column]
        return torch.from_numpy(table).to(self.device, non_blocking=True)[self.seg, column]


def _draw_like(ctx: BatchContext, like: Batch, args: BatchArgs, draw: Any, dtype: types.DALIDataType,
               fused: tuple[int, np.ndarray, np.ndarray] | None = None) -> Batch:
    """One value per element of ``like`` from :class:`CounterRNG` keyed per sample: ``draw(rng, spread)`` -> the
    values of the elements ``rng`` covers, ``spread`` (a :class:`_Spread`) giving per-sample values there. Element
    ``t`` of sample ``i`` takes the numbers of counter ``t`` under sample ``i``'s keys, so a sample's values depend
    only on its own generator and its element count (not on its batch), and are the same on the CPU and the GPU.
    On the CPU each sample is drawn in pieces of :data:`_CPU_PIECE` elements into one output (the same values);
    on the GPU the whole batch in one launch sequence: ``fused`` ``(kind, p0, p1)`` names the draw for
    :func:`draw_fused` (one Triton launch), else CounterRNG's torch ops."""
    shapes = [tuple(s) for s in like.shape()]
    n = len(shapes)
    if n == 0:
        return Batch([])
    sizes = np.array([int(np.prod(s)) for s in shapes], np.int64)
    keys = sample_keys(n, lambda i: ctx.sample_rng(i, reuse=True))
    flat = draw_elements(keys, sizes, draw, types.to_torch_dtype(dtype), ctx.device, ctx.device.type == "cpu", fused,
                         ctx.thread_pool)
    if all(s == shapes[0] for s in shapes):
        return Batch.from_dense(flat.view(n, *shapes[0]))
    return Batch.from_packed(flat, np.array(shapes, np.int64).reshape(n, -1))


def draw_elements(keys: np.ndarray, sizes: np.ndarray, draw: Any, out_type: torch.dtype, device: torch.device,
                  pieces: bool, fused: tuple[int, np.ndarray, np.ndarray] | None = None, pool: Any = None
                  ) -> torch.Tensor:
    """The values of ``sizes[i]`` elements of each sample back to back (``keys``: each sample's two keys), as
    :func:`_draw_like` describes: the whole batch at once, or with ``pieces`` sample by sample in pieces of
    :data:`_CPU_PIECE` elements (the same values), shared by the threads of ``pool`` (the pipeline's)."""
    if not pieces:
        if fused is not None:
            kind, p0, p1 = fused
            flat = draw_fused(kind, keys, sizes, p0, p1, out_type, device)
            if flat is not None:
                return flat
        seg, local = segments(sizes, device)
        flat = draw(CounterRNG(keys, seg, local), _Spread(seg, 0, device))
        return flat if flat.dtype == out_type else flat.to(out_type)
    flat = torch.empty(int(sizes.sum()), dtype=out_type, device=device)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    pieces_of = [(i, lo, min(int(size), lo + _CPU_PIECE)) for i, size in enumerate(np.asarray(sizes).tolist())
                 for lo in range(0, int(size), _CPU_PIECE)]

    def run(first: int, last: int) -> None:
        for i, lo, hi in pieces_of[first:last]:
            counter = torch.arange(lo, hi, device=device)
            flat[int(starts[i]) + lo: int(starts[i]) + hi] = draw(CounterRNG(keys[i:i + 1], None, counter),
                                                                  _Spread(None, i, device))

    share_range(pool, len(pieces_of), run)
    return flat


#: The kinds of :func:`draw_fused`.
DRAW_NORMAL, DRAW_UNIFORM, DRAW_BERNOULLI = 0, 1, 2


def fused_available(device: torch.device) -> bool:
    """Whether :func:`draw_fused` runs on ``device``: CUDA, Triton importable, ``SLUICE_EAGER`` not set."""
    return device.type == "cuda" and not env.eager() and ragged.triton_kernels() is not None


def draw_fused(kind: int, keys: np.ndarray, sizes: np.ndarray, p0: np.ndarray, p1: np.ndarray,
               out_type: torch.dtype, device: torch.device) -> torch.Tensor | None:
    """``sizes[i]`` values for each sample ``i`` back to back, element ``t`` of sample ``i`` drawn as
    :class:`CounterRNG` draws it for counter ``t`` under ``keys[i]``: ``DRAW_NORMAL`` ``p0[i] + p1[i] * normal(0)``,
    ``DRAW_UNIFORM`` ``p0[i] + p1[i] * uniform(0)`` (both in float32), ``DRAW_BERNOULLI`` ``uniform(0) < p0[i]``; in
    ONE Triton launch for the batch (:func:`sluice.kernels._triton_ragged.draw_kernel`). None where that cannot run
    (not CUDA, no Triton, ``SLUICE_EAGER=1``, or a normal or uniform output other than float32): the caller then uses
    CounterRNG's torch ops, which give the same bits (floats within the last bit: log and cos, and a fused
    multiply-add, round differently)."""
    if not fused_available(device) or (kind != DRAW_BERNOULLI and out_type != torch.float32):
        return None
    k = ragged.triton_kernels()
    n = len(sizes)
    sizes = np.asarray(sizes, np.int64)
    keys = np.asarray(keys, np.int64).reshape(-1, 2)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    # threshold = ceil(p * 2**24): top24 * 2**-24 < p exactly when top24 < threshold (p * 2**24 is exact)
    threshold = np.ceil(np.clip(np.asarray(p0, np.float64), 0.0, 1.0) * (1 << 24)).astype(np.int64)
    table = np.stack([starts, sizes, keys[:, 0] & M32, stream_key(keys[:, 1], 0), stream_key(keys[:, 1], 1),
                      threshold], 1).astype(np.int64)
    params = np.ascontiguousarray(np.stack([np.asarray(p0, np.float32), np.asarray(p1, np.float32)], 1))
    # a bool output is written as bytes (Triton stores no int1 through a torch bool pointer)
    out = torch.empty(int(sizes.sum()), dtype=torch.uint8 if out_type == torch.bool else out_type, device=device)
    if n and int(sizes.max()):
        grid = (-(-int(sizes.max()) // k.DRAW_BLOCK), n)
        k.draw_kernel[grid](ragged.host_to_device(table, device), ragged.host_to_device(params, device), out,
                            KIND=kind, BLOCK=k.DRAW_BLOCK)
    return out.view(torch.bool) if out_type == torch.bool else out


def _scalars(args: BatchArgs, name: str) -> np.ndarray:
    """The per-sample values of a scalar argument, float64, one a sample."""
    return np.array([float(np.asarray(v).reshape(-1)[0]) for v in args[name]], np.float64)


def _work_type(dtype: types.DALIDataType) -> torch.dtype:
    """The type values are drawn in: float32 for float32 outputs, float64 for every other type."""
    t = types.to_torch_dtype(dtype)
    return torch.float32 if t == torch.float32 else torch.float64


def _check_each(args: BatchArgs, check: Any) -> None:
    for i in range(args.batch_size):
        check(args.sample(i))


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
    if inputs:
        _check_each(args, lambda a: _coin(np.random.default_rng(0), (0,), a))
        p = _scalars(args, "probability")
        return _draw_like(ctx, inputs[0], args, lambda rng, spread: rng.uniform(0, dtype=torch.float64)
                          < spread(p, torch.float64), args.const("dtype"), (DRAW_BERNOULLI, p, p))
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
    dtype = args.const("dtype")
    if inputs:
        _check_each(args, lambda a: _uniform(np.random.default_rng(0), (0,), a))
        work = _work_type(dtype)
        if all(v is None for v in args["values"]):
            ranges = np.array([np.asarray(r, np.float64).reshape(-1)[:2] for r in args["range"]]).reshape(-1, 2)
            lo, width = ranges[:, 0].copy(), ranges[:, 1] - ranges[:, 0]

            def draw(rng: CounterRNG, spread: _Spread) -> torch.Tensor:
                return spread(lo, work) + rng.uniform(0, dtype=torch.float64).to(work) * spread(width, work)
            fused = (DRAW_UNIFORM, lo, width)
        else:  # the discrete values: a padded table of them, one row a sample, indexed by floor(u * count)
            values = [np.asarray(v, np.float64).reshape(-1) for v in args["values"]]
            count = np.array([v.size for v in values], np.float64)
            table = np.zeros((len(values), int(count.max())), np.float64)
            for i, v in enumerate(values):
                table[i, :v.size] = v

            def draw(rng: CounterRNG, spread: _Spread) -> torch.Tensor:
                pick = (rng.uniform(0, dtype=torch.float64) * spread(count, torch.float64)).long()
                return spread.rows(table, torch.minimum(pick, spread(count - 1, torch.float64).long())).to(work)
            fused = None
        return _draw_like(ctx, inputs[0], args, draw, dtype, fused)
    return _draw(ctx, inputs, args, _uniform, dtype)


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
    dtype = args.const("dtype")
    if inputs:
        _check_each(args, lambda a: _normal(np.random.default_rng(0), (0,), a))
        work = _work_type(dtype)
        mean, stddev = _scalars(args, "mean"), _scalars(args, "stddev")
        return _draw_like(ctx, inputs[0], args, lambda rng, spread: spread(mean, work) + spread(stddev, work)
                          * rng.normal(0, work), dtype, (DRAW_NORMAL, mean, stddev))
    return _draw(ctx, inputs, args, _normal, dtype)


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
