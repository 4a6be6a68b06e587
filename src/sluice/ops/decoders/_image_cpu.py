"""The CPU kernels of ``fn.decoders.image``, ``image_crop``, ``image_random_crop`` and ``image_slice``: a batch per
call, so that the pipeline's threads decode in parallel instead of queueing for the GIL.

Per batch, in the calling thread: the header probes and the windows (random crops for the whole batch at once with
:func:`sluice.native.image.random_crop_windows`, the same windows the per-sample generators draw). A batch read
back to back by readers.file has its headers read by the compiled core, whatever files it holds; only what the
core cannot read and JPEGs with an Exif block are probed one by one
(:func:`sluice.backends.image.batch_plan.plan_batch`). Then every
JPEG that the compiled core decodes (8-bit, gray or YCbCr, upright or with ``adjust_orientation=False``, output
RGB, BGR or GRAY in uint8) is decoded by at most ``num_threads`` calls of :func:`sluice.native.jpeg.decode` in the
pipeline's thread pool, sharing the batch, into one allocation (page-locked when a GPU operator takes the
outputs); the samples are views of it. The rest (other formats, CMYK, EXIF rotations, YCbCr / ANY_DATA outputs,
other dtypes) decode per sample with :func:`sluice.backends.image.decode`, in the pool too. The pixels are the
same either way: the core's are simplejpeg's (tests/native/test_jpeg_native.py).
"""

from __future__ import annotations

import os

import numpy as np
import torch

from sluice import types
from sluice.backends.image import ImageDecodeError, decode, probe
from sluice.backends.image.batch_plan import plan_batch
from sluice.backends.image.common import check_pixel_limit
from sluice.backends.image.common import get_max_image_pixels
from sluice.backends.image.cpu import JPEG_DECODER
from sluice.errors import SampleError
from sluice.native import image as nimg
from sluice.native import jpeg as native_jpeg
from sluice.native.image import random_crop_windows
from sluice.ops._host import batch_buffer
from sluice.ops.decoders.windows import WINDOWS, convert_image_dtype, sample_bytes, slice_windows
from sluice.ops.readers.file import batch_region
from sluice.pipeline.batch import Batch
from sluice.pipeline.pool import map_all
from sluice.schema import BatchArgs, BatchContext, Operator

__all__ = ["cpu_operator"]

_CORE_COLORSPACES = {types.RGB: "RGB", types.BGR: "BGR", types.GRAY: "GRAY"}


class _Plan:
    """One batch's host work before decoding: bytes, header facts, windows ``(y, x, h, w)`` in the upright image
    (``None`` for the whole image) and which samples the core decodes."""

    def __init__(self, bufs: list[np.ndarray], infos: list, rois: list, native: list[int]):
        self.bufs, self.infos, self.rois, self.native = bufs, infos, rois, native


def cpu_operator(op: str) -> type[Operator]:
    """The CPU operator class of decoder ``op`` ("decoders.image", "decoders.image_random_crop", ...)."""
    window = WINDOWS[op]
    random = op == "decoders.image_random_crop"

    class ImageDecoderCpu(Operator):
        """Encoded bytes in, HWC images out, a batch per call (see the module docstring)."""

        def run(self, ctx: BatchContext, data: Batch, *extra: Batch, args: BatchArgs) -> Batch:
            n = len(data)
            if n == 0:
                return Batch([], layout="HWC")
            sources = list(ctx.source_info) if ctx.source_info else [""] * n
            plan = self._plan(ctx, data, extra, args, sources)
            images: list[torch.Tensor | None] = [None] * n
            errors: dict[int, BaseException] = {}
            dense, done = self._decode_native(ctx, plan, args, sources, images, errors)
            rest = [i for i in range(n) if i not in done and i not in errors]
            for i, result in zip(rest, map_all(ctx.thread_pool, lambda i: _decode_one(plan, args, sources, i),
                                                rest)):
                if isinstance(result, BaseException):
                    errors[i] = result
                else:
                    images[i] = result
            if errors:
                first = min(errors)
                raise SampleError(first, sources[first], errors[first]) from errors[first]
            if dense is not None:
                return Batch.from_dense(dense, "HWC", sources)
            return Batch(images, layout="HWC", source_info=sources)

        def _fast_plan(self, ctx: BatchContext, data: Batch, extra: tuple[Batch, ...], args: BatchArgs,
                       sources: list[str]) -> _Plan | None:
            """The plan of a batch lying back to back in one buffer (readers.file's), whatever files it holds:
            the headers read by the compiled core in the pool's threads, a probe only for what the core cannot read
            and for JPEGs with an Exif block (:func:`~sluice.backends.image.batch_plan.plan_batch`), the windows
            drawn for the whole batch. None when the op or its arguments need the per-sample plan."""
            if extra or op not in ("decoders.image", "decoders.image_random_crop") or \
                    args.const("output_type") not in _CORE_COLORSPACES or args.const("dtype") is not types.UINT8:
                return None
            found = batch_region(data)
            if found is None:
                return None
            region, offsets, sizes = found
            adjust = args.const("adjust_orientation")
            info = nimg.jpeg_info(region.numpy(), offsets, sizes, False, ctx.thread_pool)
            plan = plan_batch(region, offsets, sizes, sources, output_type=args.const("output_type").name,
                              adjust_orientation=adjust, check_scans=False, info=info)
            hw = plan.upright
            if random:
                try:
                    windows = random_crop_windows(ctx.seed, ctx.iteration, hw[:, 0], hw[:, 1], args.const("random_area"),
                                                  args.const("random_aspect_ratio"), args.const("num_attempts"))
                except ValueError as exc:  # invalid ranges: named on the first sample, as the sample kernel did
                    raise SampleError(0, sources[0], exc) from exc
            else:
                windows = np.column_stack([np.zeros_like(hw), hw])
            # the JPEGs the core takes (the per-sample plan's _native_samples, from the header rows)
            h, w = plan.stored[:, 0], plan.stored[:, 1]
            native = ((info[:, nimg.STATUS] == 0) & np.isin(info[:, nimg.COMPONENTS], (1, 3)) & (plan.orientation == 1)
                      & (h > 0) & (w > 0) & (h * w <= get_max_image_pixels()))
            host = region.numpy()
            bufs = np.split(host, offsets[1:]) if len(offsets) > 1 else [host]
            return _Plan(bufs, plan.infos, [tuple(v) for v in windows.tolist()], np.flatnonzero(native).tolist())

        def _plan(self, ctx: BatchContext, data: Batch, extra: tuple[Batch, ...], args: BatchArgs,
                  sources: list[str]) -> _Plan:
            fast = self._fast_plan(ctx, data, extra, args, sources)
            if fast is not None:
                return fast
            n = len(data)
            adjust = args.const("adjust_orientation")
            bufs, infos, rois, upright = [], [], [None] * n, np.zeros((n, 2), np.int64)
            for i, sample in enumerate(data.samples):
                try:
                    bufs.append(sample_bytes(sample))
                    infos.append(probe(bufs[i], source=sources[i]))
                    upright[i] = infos[i].shape(adjust)[:2]
                    if not random and op not in ("decoders.image", "decoders.image_slice"):  # slice: one call below
                        rois[i] = window(args.sample(i), int(upright[i, 0]), int(upright[i, 1]), None,
                                         tuple(b[i].numpy() for b in extra))
                except Exception as exc:  # noqa: BLE001 - re-raised naming the sample, as sample kernels do
                    raise SampleError(i, sources[i], exc) from exc
            if random:
                try:
                    windows = random_crop_windows(ctx.seed, ctx.iteration, upright[:, 0], upright[:, 1],
                                                  args.const("random_area"), args.const("random_aspect_ratio"),
                                                  args.const("num_attempts"))
                except ValueError as exc:  # invalid ranges: named on the first sample, as the sample kernel did
                    raise SampleError(0, sources[0], exc) from exc
                rois = [tuple(w) for w in windows.tolist()]
            elif op == "decoders.image_slice":
                rois = slice_windows(args, upright, *extra, sources=sources)
            return _Plan(bufs, infos, rois, self._native_samples(infos, args))

        @staticmethod
        def _native_samples(infos: list, args: BatchArgs) -> list[int]:
            """The samples the core may decode (it hands back the JPEGs it does not take); images above the pixel
            limit go the per-sample way, which names the limit."""
            if args.const("output_type") not in _CORE_COLORSPACES or args.const("dtype") is not types.UINT8:
                return []
            adjust = args.const("adjust_orientation")
            return [i for i, info in enumerate(infos) if info.format == "jpeg" and info.jpeg is not None
                    and not info.jpeg.cmyk and (info.orientation == 1 or not adjust) and _within_pixel_limit(info)]

        def _decode_native(self, ctx: BatchContext, plan: _Plan, args: BatchArgs, sources: list[str],
                           images: list, errors: dict) -> tuple[torch.Tensor | None, set[int]]:
            """Decode the plan's native samples into one buffer; fill ``images`` (views of it) and ``errors``.
            Returns the dense ``(n, h, w, c)`` tensor when every sample went this way with one shape (``images``
            is then left as it is), else None; and the samples decoded."""
            idx = plan.native
            if not idx:
                return None, set()
            colorspace = _CORE_COLORSPACES[args.const("output_type")]
            c = native_jpeg.COLORSPACES[colorspace]
            windows = np.array([plan.rois[i] or (0, 0, plan.infos[i].height, plan.infos[i].width) for i in idx],
                               np.int64).reshape(-1, 4)
            sizes = windows[:, 2] * windows[:, 3] * c
            offsets = np.zeros(len(idx), np.int64)
            np.cumsum(sizes[:-1], out=offsets[1:])
            buf = batch_buffer(max(1, int(sizes.sum())), self.pin_outputs, self.spec.device_id)
            status = np.full(len(idx), -1, np.int32)
            counter = np.zeros(1, np.int64)
            data = [plan.bufs[i] for i in idx]
            out, fast = buf.numpy(), bool(args.const("use_fast_idct"))
            tasks = max(1, min(len(idx), self.spec.num_threads)) if ctx.thread_pool is not None else 1
            failed = [f for part in map_all(ctx.thread_pool, lambda _: native_jpeg.decode(
                data, windows, colorspace, fast, out, offsets, status, counter), list(range(tasks))) for f in part]
            decoder = _core_decoder_name()
            for k, reason in failed:
                if status[k] == native_jpeg.ERROR:
                    errors[idx[k]] = ImageDecodeError(f"corrupt or truncated JPEG data ({reason})",
                                                      source=sources[idx[k]], decoder=decoder)
            ok = np.flatnonzero(status == native_jpeg.OK).tolist()
            if len(ok) == len(images) and (windows[:, 2:] == windows[0, 2:]).all():
                return buf[: int(sizes.sum())].view(len(idx), int(windows[0, 2]), int(windows[0, 3]), c), set(idx)
            for k in ok:
                h, w = int(windows[k, 2]), int(windows[k, 3])
                images[idx[k]] = buf.as_strided((h, w, c), (w * c, c, 1), int(offsets[k]))
            return None, {idx[k] for k in ok}

    ImageDecoderCpu.__name__ = "".join(p.title() for p in op.split(".")[-1].split("_")) + "_cpu"
    return ImageDecoderCpu


def _within_pixel_limit(info) -> bool:
    try:
        check_pixel_limit(info.height, info.width)
    except ImageDecodeError:
        return False
    return True


def _core_decoder_name() -> str:
    """The decoder named in error messages: the core's libjpeg-turbo, or simplejpeg where the twin decodes."""
    path = native_jpeg.library()
    return f"libjpeg-turbo ({os.path.basename(path)})" if path else JPEG_DECODER


def _decode_one(plan: _Plan, args: BatchArgs, sources: list[str], i: int) -> torch.Tensor | BaseException:
    """One sample the per-sample way (as the decoders did before the core): the image, or the exception."""
    try:
        arr = decode(plan.bufs[i], output_type=args.const("output_type").name,
                     adjust_orientation=args.const("adjust_orientation"),
                     use_fast_idct=args.const("use_fast_idct"), roi=plan.rois[i], info=plan.infos[i],
                     source=sources[i])
        return convert_image_dtype(torch.from_numpy(arr), args.const("dtype"))
    except Exception as exc:  # noqa: BLE001 - raised by the caller naming the sample, the lowest index first
        return exc
