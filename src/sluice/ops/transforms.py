"""``fn.transforms.{translation, scale, rotation, shear, crop, combine}``: affine transform matrices, as DALI's
operators of those names.

Each operator gives, per sample, an ``ndim x (ndim + 1)`` float32 matrix ``[A | t]`` (no layout) that maps a point
``p`` to ``A @ p + t``, in the order of the coordinates of the point (``(x, y)`` for ``warp_affine``). With an
input matrix ``M`` (a batch of ``ndim x (ndim + 1)`` matrices) the new transform ``T`` is applied after it
(``T @ M``), or before it with ``reverse_order=True`` (``M @ T``); ``transforms.combine`` chains its inputs in the
order given (``[T1, T2, T3]`` is ``T3(T2(T1(p)))``). ``center`` moves the origin of scalings, rotations and shears
to a point: ``p -> A @ (p - c) + c``. Arguments may vary per sample (DataNodes); the matrices are computed with
NumPy for the whole batch at once. They run on the CPU, as in DALI, and feed ``warp_affine``'s ``matrix``
argument or ``coord_transform``.

Example::

    mt = fn.transforms.rotation(angle=fn.random.uniform(range=(-30, 30)), center=[112, 112])
    mt = fn.transforms.translation(mt, offset=[10, 0])          # rotate, then shift right by 10 pixels
    images = fn.warp_affine(images, matrix=mt, inverse_map=False, fill_value=0)
"""

from __future__ import annotations

from collections.abc import Callable
import numpy as np
import torch

from sluice.pipeline.batch import Batch
from sluice.schema import REQUIRED, Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["SCHEMAS", "affine_stack"]

_REVERSE = Arg("reverse_order", bool, False, "Apply this transform before the input transform (M @ T) instead of "
               "after it (T @ M). For transforms.combine: combine the inputs in the reverse order.")
_CENTER_DOC = "The center of the {what}; as many values as the transform has dimensions."


def _schema(name: str, doc: str, args: list[Arg], inputs: int | tuple[int, int] = (0, 1)) -> OpSchema:
    return OpSchema(f"transforms.{name}", doc=doc, inputs=inputs, devices=("cpu",), args=[*args, _REVERSE],
                    output_layout="", input_names=None if inputs != (0, 1) else ["input"])


TRANSLATION = _schema("translation", """Produces a translation affine transform matrix ``[I | offset]``.

    Example::

        mt = fn.transforms.translation(offset=[10.0, -5.0])      # x + 10, y - 5
    """, [Arg("offset", "float_list", REQUIRED, "The translation vector; its length gives the number of "
              "dimensions.", per_sample=True)])

SCALE = _schema("scale", """Produces a scaling affine transform matrix (``diag(scale)``, about ``center``).

    Example::

        mt = fn.transforms.scale(scale=[2.0, 0.5], center=[112.0, 112.0])
    """, [Arg("scale", "float_list", REQUIRED, "The scale factor per dimension (one value: every dimension of "
              "``ndim`` or of the input transform).", per_sample=True),
          Arg("center", "float_list", None, _CENTER_DOC.format(what="scaling"), per_sample=True),
          Arg("ndim", int, None, "The number of dimensions, where ``scale`` is one value and there is no input.",
              min=1, max=6)])

ROTATION = _schema("rotation", """Produces a rotation affine transform matrix: 2-D (``[[cos, -sin], [sin, cos]]``)
    or, with ``axis``, 3-D about that axis (right-handed), about ``center``.

    Example::

        mt = fn.transforms.rotation(angle=30.0, center=[112.0, 112.0])
    """, [Arg("angle", float, REQUIRED, "The angle, in degrees.", per_sample=True),
          Arg("axis", "float_list", None, "The axis of a 3-D rotation (any non-zero length).", per_sample=True),
          Arg("center", "float_list", None, _CENTER_DOC.format(what="rotation"), per_sample=True)])

SHEAR = _schema("shear", """Produces a shear affine transform matrix.

    2-D: ``shear = [sx, sy]`` gives ``[[1, sx], [sy, 1]]`` (``sx``: the offset along x per unit of y). 3-D: six
    factors ``[sxy, sxz, syx, syz, szx, szy]``. ``angles`` gives them as angles in degrees
    (``factor = tan(angle)``, angles in [-90, 90]). Exactly one of ``shear`` and ``angles``.

    Example::

        mt = fn.transforms.shear(shear=[0.3, 0.0])
    """, [Arg("shear", "float_list", None, "The shear factors (2 for 2-D, 6 for 3-D).", per_sample=True),
          Arg("angles", "float_list", None, "The shear angles in degrees, instead of ``shear``.", per_sample=True),
          Arg("center", "float_list", None, _CENTER_DOC.format(what="shear"), per_sample=True)])

CROP = _schema("crop", """Produces an affine transform matrix that maps the box ``from_start..from_end`` onto the box
    ``to_start..to_end`` (per dimension: ``scale = (to_end - to_start) / (from_end - from_start)``,
    ``t = to_start - scale * from_start``). One value is repeated to every dimension.

    Example::

        mt = fn.transforms.crop(from_start=[0, 0], from_end=[640, 480], to_start=[0, 0], to_end=[1, 1])
    """, [Arg("from_start", "float_list", [0.0], "The lower corner of the source box.", per_sample=True),
          Arg("from_end", "float_list", [1.0], "The upper corner of the source box.", per_sample=True),
          Arg("to_start", "float_list", [0.0], "The lower corner of the destination box.", per_sample=True),
          Arg("to_end", "float_list", [1.0], "The upper corner of the destination box.", per_sample=True),
          Arg("absolute", bool, False, "Swap start and end where start > end.")])

COMBINE = _schema("combine", """Combines two or more affine transforms (all of one shape): the result applies them
    in the order given (``[T1, T2, T3]`` gives ``T3 @ T2 @ T1``), or the reverse with ``reverse_order=True``.

    Example::

        mt = fn.transforms.combine(fn.transforms.scale(scale=[2, 2]), fn.transforms.translation(offset=[5, 5]))
    """, [], inputs=(2, 99))

SCHEMAS = [TRANSLATION, SCALE, ROTATION, SHEAR, CROP, COMBINE]


# ---- helpers ------------------------------------------------------------------------------------------------
def _values(args: BatchArgs, name: str, n: int) -> list[np.ndarray] | None:
    """The argument's value per sample as float64 arrays (None where it is not given)."""
    if name not in args or (args.is_const(name) and args.const(name) is None):
        return None
    return [np.asarray(v, np.float64).reshape(-1) for v in args[name]]


def _stack(values: list[np.ndarray], ndim: int, name: str, op: str) -> np.ndarray:
    """``(n, ndim)``: each sample's values, one value repeated to ``ndim``."""
    out = np.empty((len(values), ndim))
    for i, v in enumerate(values):
        if v.size == 1:
            out[i] = v[0]
        elif v.size == ndim:
            out[i] = v
        else:
            raise ValueError(f"fn.transforms.{op}: sample {i}: argument '{name}' has {v.size} values for a "
                             f"{ndim}-D transform; give 1 or {ndim}")
    return out


def _input_matrices(data: Batch | None, op: str) -> np.ndarray | None:
    """The input transforms as ``(n, ndim + 1, ndim + 1)`` float64 homogeneous matrices."""
    if data is None:
        return None
    shapes = {tuple(s) for s in data.shape()}
    if len(shapes) > 1:
        raise ValueError(f"fn.transforms.{op}: the input matrices differ in shape ({sorted(shapes)}); all must have "
                         "one shape")
    shape = shapes.pop() if shapes else (2, 3)
    if len(shape) != 2 or shape[1] != shape[0] + 1:
        raise ValueError(f"fn.transforms.{op}: the input must be ndim x (ndim + 1) affine matrices, got samples of "
                         f"shape {shape}")
    if len(data) and not data.dtype.is_floating_point:
        raise ValueError(f"fn.transforms.{op}: the input matrices must be floats, got {data.dtype}")
    dense = data.as_tensor().cpu().numpy().astype(np.float64) if len(data) else np.zeros((0, *shape))
    return affine_stack(dense)


def affine_stack(matrices: np.ndarray) -> np.ndarray:
    """``(n, d, d + 1)`` affine matrices as ``(n, d + 1, d + 1)`` homogeneous ones."""
    n, d = matrices.shape[0], matrices.shape[1]
    out = np.zeros((n, d + 1, d + 1))
    out[:, :d] = matrices
    out[:, d, d] = 1.0
    return out


def _with_center(m: np.ndarray, center: np.ndarray | None) -> np.ndarray:
    """``m`` (n, d+1, d+1) about ``center`` (n, d): translation ``c - A @ c``."""
    if center is not None:
        d = m.shape[1] - 1
        m[:, :d, d] = center - np.einsum("nij,nj->ni", m[:, :d, :d], center)
    return m


def _output(m: np.ndarray) -> Batch:
    d = m.shape[1] - 1
    return Batch.from_dense(torch.from_numpy(np.ascontiguousarray(m[:, :d, :], np.float32)))


def _transform_kernel(op: str, make: Callable[[BatchArgs, int, int | None], np.ndarray]) -> Callable:
    """A batch kernel: ``make(args, n, input_ndim)`` gives the ``(n, d+1, d+1)`` matrices, combined with the
    input's."""

    def kernel(ctx: BatchContext, *inputs: Batch, args: BatchArgs) -> Batch:
        data = inputs[0] if inputs else None
        n = len(data) if data is not None else ctx.batch_size
        m_in = _input_matrices(data, op)
        t = make(args, n, m_in.shape[1] - 1 if m_in is not None else None)
        if m_in is not None:
            if m_in.shape[1:] != t.shape[1:]:
                raise ValueError(f"fn.transforms.{op}: the input describes a {m_in.shape[1] - 1}-D transform, but "
                                 f"the arguments a {t.shape[1] - 1}-D one")
            t = m_in @ t if args.const("reverse_order") else t @ m_in
        return _output(t)

    kernel.__name__ = kernel.__qualname__ = op
    return kernel


def _ndim_of(values: list[np.ndarray], name: str, op: str) -> int:
    sizes = {v.size for v in values}
    if len(sizes) > 1:
        raise ValueError(f"fn.transforms.{op}: argument '{name}' has {sorted(sizes)} values in different samples; "
                         "every sample needs the same number")
    return sizes.pop() if sizes else 2


# ---- the transforms -------------------------------------------------------------------------------------------
def _translation(args: BatchArgs, n: int, in_ndim: int | None) -> np.ndarray:
    offset = _values(args, "offset", n)
    d = _ndim_of(offset, "offset", "translation")
    m = np.tile(np.eye(d + 1), (n, 1, 1))
    m[:, :d, d] = _stack(offset, d, "offset", "translation")
    return m


def _scale(args: BatchArgs, n: int, in_ndim: int | None) -> np.ndarray:
    scale = _values(args, "scale", n)
    center = _values(args, "center", n)
    d = _ndim_of(scale, "scale", "scale")
    if d == 1:
        d = args.const("ndim") or in_ndim or (center[0].size if center is not None else 1)
    s = _stack(scale, d, "scale", "scale")
    m = np.tile(np.eye(d + 1), (n, 1, 1))
    m[:, np.arange(d), np.arange(d)] = s
    return _with_center(m, _stack(center, d, "center", "scale") if center is not None else None)


def _rotation(args: BatchArgs, n: int, in_ndim: int | None) -> np.ndarray:
    angle = np.radians(np.asarray(args["angle"], np.float64).reshape(n))
    axis = _values(args, "axis", n)
    center = _values(args, "center", n)
    c, s = np.cos(angle), np.sin(angle)
    if axis is None:
        d = 2
        m = np.tile(np.eye(3), (n, 1, 1))
        m[:, 0, 0], m[:, 0, 1], m[:, 1, 0], m[:, 1, 1] = c, -s, s, c
    else:
        d = 3
        a = _stack(axis, 3, "axis", "rotation")
        norm = np.linalg.norm(a, axis=1)
        if (norm == 0).any():
            raise ValueError(f"fn.transforms.rotation: sample {int(np.argmax(norm == 0))}: the axis has zero length")
        u, v, w = (a / norm[:, None]).T
        k = 1 - c
        m = np.tile(np.eye(4), (n, 1, 1))
        m[:, :3, :3] = np.stack([
            np.stack([u * u * k + c, u * v * k - w * s, u * w * k + v * s], 1),
            np.stack([u * v * k + w * s, v * v * k + c, v * w * k - u * s], 1),
            np.stack([u * w * k - v * s, v * w * k + u * s, w * w * k + c], 1)], 1)
    return _with_center(m, _stack(center, d, "center", "rotation") if center is not None else None)


def _shear(args: BatchArgs, n: int, in_ndim: int | None) -> np.ndarray:
    shear = _values(args, "shear", n)
    angles = _values(args, "angles", n)
    if (shear is None) == (angles is None):
        raise ValueError("fn.transforms.shear: give exactly one of 'shear' and 'angles'")
    name, given = ("shear", shear) if shear is not None else ("angles", angles)
    k = _ndim_of(given, name, "shear")
    if k not in (2, 6):
        raise ValueError(f"fn.transforms.shear: '{name}' needs 2 values (2-D) or 6 (3-D), got {k}")
    f = np.stack(given) if given else np.zeros((0, k))
    if angles is not None:
        if ((f < -90) | (f > 90)).any():
            raise ValueError(f"fn.transforms.shear: the angles must be in [-90, 90], got {f[(f < -90) | (f > 90)][0]}")
        f = np.tan(np.radians(f))
    d = 2 if k == 2 else 3
    m = np.tile(np.eye(d + 1), (n, 1, 1))
    off_diagonal = [(0, 1), (1, 0)] if d == 2 else [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]
    for j, (r, col) in enumerate(off_diagonal):
        m[:, r, col] = f[:, j]
    center = _values(args, "center", n)
    return _with_center(m, _stack(center, d, "center", "shear") if center is not None else None)


def _crop(args: BatchArgs, n: int, in_ndim: int | None) -> np.ndarray:
    names = ("from_start", "from_end", "to_start", "to_end")
    vals = {k: _values(args, k, n) for k in names}
    d = max(_ndim_of(vals[k], k, "crop") for k in names)
    fs, fe, ts, te = (_stack(vals[k], d, k, "crop") for k in names)
    if args.const("absolute"):
        fs, fe = np.minimum(fs, fe), np.maximum(fs, fe)
        ts, te = np.minimum(ts, te), np.maximum(ts, te)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = (te - ts) / (fe - fs)
    m = np.tile(np.eye(d + 1), (n, 1, 1))
    m[:, np.arange(d), np.arange(d)] = scale
    m[:, :d, d] = ts - scale * fs
    return m


for _s, _make in ((TRANSLATION, _translation), (SCALE, _scale), (ROTATION, _rotation), (SHEAR, _shear),
                  (CROP, _crop)):
    _s.batch_kernel("cpu")(_transform_kernel(_s.name.split(".")[1], _make))


@COMBINE.batch_kernel("cpu")
def combine(ctx: BatchContext, *inputs: Batch, args: BatchArgs) -> Batch:
    mats = [_input_matrices(b, "combine") for b in inputs]
    shapes = {m.shape[1:] for m in mats}
    if len(shapes) > 1:
        raise ValueError(f"fn.transforms.combine: all input transforms must have one shape, got "
                         f"{sorted((s[0] - 1, s[0]) for s in shapes)}")
    out = mats[0]
    for m in mats[1:]:
        out = out @ m if args.const("reverse_order") else m @ out
    return _output(out)


del _s, _make
