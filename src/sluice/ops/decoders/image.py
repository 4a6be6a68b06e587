"""Image decoders: ``fn.decoders.image``, ``image_random_crop``, ``image_crop``, ``image_slice`` and
``fn.peek_image_shape``.

Formats: JPEG (baseline, progressive; 4:4:4, 4:2:2, 4:2:0, gray, CMYK/YCCK), PNG (8/16 bit, palette, alpha),
BMP, TIFF, PNM (pbm/pgm/ppm), WebP, JPEG 2000 and GIF (first frame). ``device="cpu"`` decodes with libjpeg-turbo
(simplejpeg), OpenCV and Pillow in the pipeline's threads; ``device="mixed"`` takes CPU bytes and returns CUDA
images, sharing JPEGs between the GPU's hardware JPEG engines, CUDA nvJPEG and the CPU threads, JPEG 2000 on
nvJPEG2000, the rest on the CPU threads (see :mod:`sluice.backends.image.gpu`). In a pipeline the mixed
decoders' host work (header probes, crop windows) runs in the CPU stage, which also starts the batch's decoding,
so that it overlaps the device stage's work on the batch before (``prepare``). A batch read by readers.file
(``decoders.image``, ``image_random_crop`` and ``image_slice``, RGB or GRAY) takes the batch lane whatever files it holds: its
headers read by the compiled core, the windows drawn for the whole batch at once, the GPU's JPEGs decoded in one
batched call while the pipeline's threads decode the progressive, CMYK, PNG ... files, all into one output buffer
(see :mod:`sluice.backends.image.batch_plan`); the operator's ``path_stats()`` counts the samples of each path. The crop variants decode only the
kept region where the codec allows it (nvImageCodec region decoding on the GPU); on the CPU the window is cut
right after decoding, before any conversion. EXIF orientation is applied when ``adjust_orientation`` is set, and
crop windows refer to the upright image. Bad input (empty, truncated, corrupt, unknown format, above the pixel
limit set with ``sluice.backends.image.set_max_image_pixels``) raises an error naming the file, the decoder and
the reason.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from sluice import types
from sluice.backends.image import ImageDecodeError, ImageInfo, decode, probe
from sluice.errors import SampleError
from sluice.ops.decoders._image_cpu import cpu_operator
from sluice.ops.decoders.windows import WINDOWS, Roi, convert_image_dtype, sample_bytes, slice_windows
from sluice.ops.readers.file import batch_region, contiguous_bytes
from sluice.ops.tensor.slice import SCHEMA as SLICE
from sluice.pipeline.batch import Batch
from sluice.runtime import runtime_of
from sluice.schema import Arg, BatchArgs, BatchContext, Operator, OpSchema, OpSpec, SampleContext
from sluice.backends.image.batch_plan import plan_batch
from sluice.native import image as nimg
from sluice.backends.image.gpu import GpuImageDecoder

__all__ = ["IMAGE", "IMAGE_RANDOM_CROP", "IMAGE_CROP", "IMAGE_SLICE", "PEEK_IMAGE_SHAPE", "convert_image_dtype"]

logger = logging.getLogger(__name__)

_DECODER_ARGS = [
    Arg("output_type", types.DALIImageType, types.RGB,
        "Colour space of the output: types.RGB, BGR, GRAY (1 channel), YCbCr or ANY_DATA (the channels as "
        "stored, alpha kept)."),
    Arg("dtype", types.DALIDataType, types.UINT8,
        "Output type: UINT8, UINT16 or FLOAT (values scaled to [0, 1]).",
        choices=(types.UINT8, types.UINT16, types.FLOAT)),
    Arg("adjust_orientation", bool, True, "Apply the EXIF orientation (rotate/mirror to upright)."),
    Arg("hw_decoder_load", float, 0.9,
        "mixed: share of the GPU-decodable JPEGs given to the hardware JPEG engines (nvImageCodec); the rest "
        "goes to CUDA nvJPEG on the SMs. Without an nvImageCodec decoder on the SMs (its CUDA 13 builds) "
        "torchvision's batched nvJPEG, which drives the same engines, takes every JPEG and this has no effect."),
    Arg("use_fast_idct", bool, False, "Use libjpeg-turbo's fast integer IDCT (less exact)."),
    Arg("jpeg_fancy_upsampling", bool, False,
        "mixed: upsample chroma like libjpeg-turbo ('fancy' upsampling) so GPU and CPU outputs agree closer."),
    Arg("preallocate_width_hint", int, 0, "Accepted for DALI compatibility (buffers are sized per batch)."),
    Arg("preallocate_height_hint", int, 0, "Accepted for DALI compatibility (buffers are sized per batch)."),
    Arg("affine", bool, True, "Accepted for DALI compatibility; no effect."),
    Arg("device_memory_padding", int, 16 * 1024 * 1024, "Accepted for DALI compatibility; no effect."),
    Arg("host_memory_padding", int, 8 * 1024 * 1024, "Accepted for DALI compatibility; no effect."),
    Arg("device_memory_padding_jpeg2k", int, 0, "Accepted for DALI compatibility; no effect."),
    Arg("host_memory_padding_jpeg2k", int, 0, "Accepted for DALI compatibility; no effect."),
    Arg("hybrid_huffman_threshold", int, 1000000, "Accepted for DALI compatibility; no effect."),
]

_CROP_POS_ARGS = [
    Arg("crop_pos_x", float, 0.5, "Horizontal position of the window, 0 (left) to 1 (right).", per_sample=True),
    Arg("crop_pos_y", float, 0.5, "Vertical position of the window, 0 (top) to 1 (bottom).", per_sample=True),
]


def _output_type_name(args: dict) -> str:
    return args["output_type"].name


@dataclass
class _WholeBatch:
    """A batch whose decoding :meth:`GpuImageDecoder.start_batch` started (the mixed decoders' batch lane): the
    started decode, the crop windows (``(n, 4)``: y, x, h, w) and the output's channel count."""

    started: object
    windows: np.ndarray
    channels: int


# ------------------------------------------------------------------------------------------------------------
# Kernels shared by the four decoders
# ------------------------------------------------------------------------------------------------------------
def _make_cpu_kernel(op: str) -> Callable:
    window = WINDOWS[op]

    def kernel(ctx: SampleContext, data: torch.Tensor, *extra: torch.Tensor, **args) -> torch.Tensor:
        buf = sample_bytes(data)
        info = probe(buf, source=ctx.source_info)
        h, w, _ = info.shape(args["adjust_orientation"])
        rng = ctx.rng if op == "decoders.image_random_crop" else None
        roi = window(args, h, w, rng, tuple(e.numpy() for e in extra))
        arr = decode(buf, output_type=_output_type_name(args), adjust_orientation=args["adjust_orientation"],
                     use_fast_idct=args["use_fast_idct"], roi=roi, info=info, source=ctx.source_info)
        return convert_image_dtype(torch.from_numpy(arr), args["dtype"])

    kernel.__name__ = op.split(".")[-1] + "_cpu"
    return kernel


def _make_mixed_operator(op: str) -> type[Operator]:
    window = WINDOWS[op]

    class MixedImageDecoder(Operator):
        """Bytes on the CPU in, CUDA HWC images out, on the pipeline's stream (see sluice.backends.image.gpu)."""

        def __init__(self, spec: OpSpec):
            super().__init__(spec)
            self._decoder = None

        def _get_decoder(self, ctx: BatchContext):
            if self._decoder is None:
                a = self.spec.args
                device = ctx.device if ctx.device.index is not None or ctx.device.type != "cuda" else \
                    torch.device("cuda", 0)
                runtime = runtime_of(self.spec)
                # a session of the pipeline's runtime, of this operator's own (closed with the pipeline)
                self._decoder = runtime.session(("image decoder", id(self)), lambda: GpuImageDecoder(
                    device, hw_decoder_load=a.get("hw_decoder_load", 0.9),
                    jpeg_fancy_upsampling=a.get("jpeg_fancy_upsampling", False),
                    use_fast_idct=a.get("use_fast_idct", False), num_cpu_threads=max(1, self.spec.num_threads),
                    runtime=runtime))
                logger.info("%s (mixed) decodes with %s", op, self._decoder.backend_name)
            return self._decoder

        def _host_work(self, ctx: BatchContext, data: Batch, *extra: Batch,
                       args: BatchArgs) -> tuple[list, list[ImageInfo], list[Roi | None], torch.Tensor | None]:
            """The batch's host work before decoding: its bytes, header probes, (crop variants) windows, and
            readers.file's batch buffer when the samples lie back to back in it (the scan check copies it as it
            lies)."""
            n = len(data)
            sources = self._sources(ctx, n)
            bufs = [sample_bytes(s) for s in data.samples]
            adjust = args.const("adjust_orientation")
            # Header probes are a few microseconds each: cheaper in this thread than as thread-pool tasks.
            infos: list[ImageInfo] = []
            rois: list[Roi | None] = [None] * n
            per_sample = op not in ("decoders.image", "decoders.image_slice")  # image_slice: one call below
            for i in range(n):
                try:
                    infos.append(probe(bufs[i], source=sources[i]))
                    if per_sample:
                        h, w, _ = infos[i].shape(adjust)
                        rng = ctx.sample_rng(i, reuse=True) if op == "decoders.image_random_crop" else None
                        rois[i] = window(args.sample(i), h, w, rng, tuple(b[i].numpy() for b in extra))
                except Exception as exc:  # noqa: BLE001 - re-raised naming the sample, as sample kernels do
                    raise SampleError(i, sources[i], exc) from exc
            if op == "decoders.image_slice":
                hw = np.array([info.shape(adjust)[:2] for info in infos], np.int64).reshape(n, 2)
                rois = slice_windows(args, hw, *extra, sources=sources)
            return bufs, infos, rois, contiguous_bytes(data.samples)

        def _decode_kwargs(self, ctx: BatchContext, args: BatchArgs, host) -> dict:
            bufs, infos, rois, region = host
            decoder = self._get_decoder(ctx)
            return {"output_type": args.const("output_type").name, "sources": self._sources(ctx, len(bufs)),
                    "adjust_orientation": args.const("adjust_orientation"), "rois": rois, "infos": infos,
                    "thread_pool": ctx.thread_pool, "region": region if decoder.validate_scans else None}

        @staticmethod
        def _sources(ctx: BatchContext, n: int) -> list[str]:
            return list(ctx.source_info) if ctx.source_info else [""] * n

        def _start_whole(self, ctx: BatchContext, data: Batch, extra: tuple, args: BatchArgs) -> _WholeBatch | None:
            """The batch lane, for batches lying back to back in readers.file's buffer, whatever files they hold:
            their headers read and scans checked in the compiled core (pool threads, no GIL), each sample routed
            (:func:`~sluice.backends.image.batch_plan.plan_batch`: the GPU's JPEGs, the core's, the rest), the
            windows drawn for the whole batch at once, and the decoding of the whole batch started in one call: one
            batched GPU call for the GPU's JPEGs while the pool's threads decode the others. None when the batch
            does not qualify (then the general path below decodes it, sample by sample where it must)."""
            otype = args.const("output_type").name
            if (op not in ("decoders.image", "decoders.image_random_crop", "decoders.image_slice")
                    or (extra and op != "decoders.image_slice") or otype not in ("RGB", "GRAY")
                    or ctx.sample_ids is not None):
                return None
            decoder = self._get_decoder(ctx)
            found = batch_region(data) if decoder.takes_whole_jpeg_batches else None
            if found is None:
                return None
            region, offsets, sizes = found
            sources = self._sources(ctx, len(data))
            plan = plan_batch(region, offsets, sizes, sources, output_type=otype,
                              adjust_orientation=args.const("adjust_orientation"),
                              check_scans=decoder.validate_scans, pool=ctx.thread_pool,
                              core_decodes=decoder.core_decodes_jpeg())
            if args.const("dtype") is not types.UINT8 and any(i is not None and i.bit_depth != 8 for i in plan.infos):
                return None  # a 16-bit source keeps its depth in a UINT16/FLOAT output: the general path
            hw = plan.upright
            if op == "decoders.image_random_crop":
                try:
                    windows = nimg.random_crop_windows(ctx.seed, ctx.iteration, hw[:, 0], hw[:, 1],
                                                       args.const("random_area"), args.const("random_aspect_ratio"),
                                                       args.const("num_attempts"))
                except ValueError as exc:  # invalid ranges: named on the first sample, as the per-sample path does
                    raise SampleError(0, sources[0], exc) from exc
            elif op == "decoders.image_slice":  # the windows of the general path, always inside the image
                windows = np.array(slice_windows(args, hw, *extra, sources=sources), np.int64).reshape(-1, 4)
            else:
                windows = np.column_stack([np.zeros_like(hw), hw])
            plan.windows = windows
            started = decoder.start_batch(plan, ctx.thread_pool, self.spec.num_threads)
            return _WholeBatch(started, windows, plan.channels)

        def path_stats(self) -> dict[str, int]:
            """How many batches and samples each decoding path took so far (see ``GpuImageDecoder.stats``):
            ``lane_batches`` and its samples ``lane_gpu`` (one batched GPU call), ``lane_cpu_core`` (the compiled
            core) and ``lane_cpu_codec`` (a codec call each); ``general_batches``, ``general_gpu`` and
            ``general_cpu`` for the general path."""
            return dict(self._decoder.stats) if self._decoder is not None else {}

        def prepare(self, ctx: BatchContext, data: Batch, *extra: Batch, args: BatchArgs):
            """Run by the executor in the CPU stage: the host work, then (on a GPU) the decoding itself is started
            in the background, so that it overlaps the device stage's work on the previous batch."""
            whole = self._start_whole(ctx, data, extra, args)
            if whole is not None:
                return whole
            host = self._host_work(ctx, data, *extra, args=args)
            if not len(data) or ctx.device.type != "cuda":
                return host, None
            return host, self._get_decoder(ctx).start(host[0], **self._decode_kwargs(ctx, args, host))

        def run(self, ctx: BatchContext, data: Batch, *extra: Batch, args: BatchArgs) -> Batch:
            n = len(data)
            if n == 0:
                return Batch([], layout="HWC")
            sources = self._sources(ctx, n)
            dtype = args.const("dtype")
            decoder = self._get_decoder(ctx)
            whole = ctx.prepared if ctx.prepared is not None else self._start_whole(ctx, data, extra, args)
            if isinstance(whole, _WholeBatch):
                try:
                    flat = decoder.finish_jpegs(whole.started, decoder.current_stream())
                except SampleError:
                    raise  # a sample the CPU could not decode: named with its file
                except Exception as exc:  # noqa: BLE001 - decoded the general way, which names a bad file
                    logger.warning("%s: the batched JPEG decode failed (%s: %s); decoding the batch sample by "
                                   "sample", op, type(exc).__name__, exc)
                else:
                    shapes = np.column_stack([whole.windows[:, 2:], np.full(n, whole.channels)])
                    # one conversion for the whole buffer (elementwise: the same values as per sample)
                    return Batch.from_packed(convert_image_dtype(flat, dtype), shapes, "HWC", sources)
                ctx.prepared = None
            host, started = ctx.prepared or (self._host_work(ctx, data, *extra, args=args), None)

            def named(fn):  # a decoder error names the file: raise it naming the sample too
                try:
                    return fn()
                except ImageDecodeError as exc:
                    index = next((i for i, s in enumerate(sources) if s and s == exc.source), None)
                    if index is None:
                        raise
                    raise SampleError(index, exc.source, exc) from exc

            if started is not None:
                images, checks = named(lambda: decoder.finish(started, decoder.current_stream()))
                for check in checks:
                    ctx.defer(lambda check=check: named(check))
            else:
                images = named(lambda: decoder.decode(
                    host[0], defer=lambda check: ctx.defer(lambda: named(check)),
                    **self._decode_kwargs(ctx, args, host)))
            return Batch([convert_image_dtype(t, dtype) for t in images], layout="HWC", source_info=sources)

        def close(self) -> None:
            if self._decoder is not None:
                logger.info("%s (mixed): samples by decoding path %s", op,
                            {k: v for k, v in self._decoder.stats.items() if v})
                self._decoder.close()

    MixedImageDecoder.__name__ = "".join(p.title() for p in op.split(".")[-1].split("_")) + "_mixed"
    return MixedImageDecoder


# libjpeg-turbo (simplejpeg) for JPEG, OpenCV and Pillow for the other formats; the mixed decoders use them for
# what nvJPEG cannot take, and torchvision's nvJPEG.
_CPU_CODECS = ("simplejpeg", "cv2", "PIL")


def _decoder_schema(name: str, summary: str, example: str, extra_args: list[Arg], *, inputs=1,
                    random: bool = False, input_names=None) -> OpSchema:
    schema = OpSchema(
        name,
        doc=f"""{summary}

        Supported formats: JPEG, PNG, BMP, TIFF, PNM, WebP, JPEG 2000, GIF (first frame). The output is HWC.
        ``device="mixed"`` returns CUDA images; ``device="cpu"`` decodes in the pipeline's threads. Example::

            {example}
        """,
        inputs=inputs, outputs=1, devices=("cpu", "mixed"), random=random, output_layout="HWC",
        input_names=input_names, args=_DECODER_ARGS + extra_args,
        requires={"cpu": _CPU_CODECS, "mixed": _CPU_CODECS + ("torchvision",)})
    schema.operator_class("cpu")(cpu_operator(name))
    schema.operator_class("mixed")(_make_mixed_operator(name))
    return schema


IMAGE = _decoder_schema(
    "decoders.image", "Decodes images.",
    'images = fn.decoders.image(jpegs, device="mixed", output_type=types.RGB)', [])

IMAGE_CROP = _decoder_schema(
    "decoders.image_crop", "Decodes images and keeps a fixed-size window (decoding only that region on the GPU).",
    'images = fn.decoders.image_crop(jpegs, device="mixed", crop=(224, 224), crop_pos_x=0.5, crop_pos_y=0.5)',
    [Arg("crop", "float_list", None, "Window size (height, width) in pixels.", per_sample=True, min=0),
     Arg("crop_w", float, 0.0, "Window width in pixels (overrides crop).", per_sample=True, min=0),
     Arg("crop_h", float, 0.0, "Window height in pixels (overrides crop).", per_sample=True, min=0),
     *_CROP_POS_ARGS])

IMAGE_RANDOM_CROP = _decoder_schema(
    "decoders.image_random_crop",
    "Decodes images and keeps a random window of random area and aspect ratio (DALI's RandomCropGenerator).",
    'images = fn.decoders.image_random_crop(jpegs, device="mixed", random_area=[0.08, 1.0])',
    [Arg("random_area", "float_list", [0.08, 1.0], "Range of the window's area, as a fraction of the image."),
     Arg("random_aspect_ratio", "float_list", [3 / 4, 4 / 3], "Range of the window's width / height."),
     Arg("num_attempts", int, 10, "Draws before falling back to the whole image with the aspect ratio clamped.",
         min=1)],
    random=True)

IMAGE_SLICE = _decoder_schema(
    "decoders.image_slice",
    "Decodes images and keeps a window: given by anchor and shape inputs, or by start/end/shape arguments.",
    'images = fn.decoders.image_slice(jpegs, anchor, shape, device="mixed")      # e.g. from fn.random_bbox_crop\n'
    '            images = fn.decoders.image_slice(jpegs, rel_start=[0.1, 0.2], rel_shape=[0.5, 0.5])\n'
    '            images = fn.decoders.image_slice(jpegs, start=[16, 8], end=[240, 200])   # x, y in pixels',
    [Arg("axis_names", str, "WH", "Order of the anchor/shape and start/end/shape values: 'WH' (x first), 'HW', "
         "'W' or 'H'."),
     Arg("axes", "int_list", None, "The same as axis_names by index (0 = height, 1 = width); overrides it."),
     Arg("normalized_anchor", bool, True, "The anchor input is a fraction of the image size (else pixels)."),
     Arg("normalized_shape", bool, True, "The shape input is a fraction of the image size (else pixels)."),
     # start / rel_start and end / rel_end / shape / rel_shape: declared once, by fn.slice
     *(SLICE.args[name] for name in ("start", "rel_start", "end", "rel_end", "shape", "rel_shape")),
     Arg("out_of_bounds_policy", str, "error", "What a window outside the image does.",
         choices=("error", "trim_to_shape"))],
    inputs=(1, 3), input_names=["data", "anchor", "shape_input"])

# ------------------------------------------------------------------------------------------------------------
# peek_image_shape
# ------------------------------------------------------------------------------------------------------------
PEEK_IMAGE_SHAPE = OpSchema(
    "peek_image_shape",
    doc="""Returns the shape (H, W, C) of encoded images, reading only their headers.

    With ``adjust_orientation`` the EXIF orientation is applied (height and width swap for rotated images).
    Example::

        shapes = fn.peek_image_shape(jpegs)
    """,
    inputs=1, outputs=1, devices=("cpu",), output_layout="", requires={"cpu": ("PIL",)},
    args=[Arg("dtype", types.DALIDataType, types.INT64, "Type of the output.",
              choices=(types.INT32, types.INT64, types.UINT32, types.UINT64, types.FLOAT, types.FLOAT64)),
          Arg("adjust_orientation", bool, True, "Swap height and width for images whose EXIF orientation rotates "
              "them by 90 degrees.")])


@PEEK_IMAGE_SHAPE.sample_kernel("cpu")
def peek_image_shape_cpu(ctx: SampleContext, data: torch.Tensor, *, dtype, adjust_orientation, **_) -> torch.Tensor:
    """The (H, W, C) of one encoded image from its header."""
    info = probe(sample_bytes(data), source=ctx.source_info)
    return torch.tensor(info.shape(adjust_orientation), dtype=types.to_torch_dtype(dtype))
