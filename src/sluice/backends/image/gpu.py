"""Batched GPU image decoding: nvImageCodec (hardware JPEG engines + CUDA nvJPEG) or torchvision's batched nvJPEG,
with libjpeg-turbo on the CPU threads working on part of the same batch at the same time.

One :class:`GpuImageDecoder` per operator instance. ``decode`` takes a batch of encoded samples and returns CUDA
uint8 HWC tensors that are ready in order on the caller's stream:

* baseline YCbCr/gray JPEGs are split by :class:`SplitScheduler` between the hardware engines (nvImageCodec
  ``HW_GPU_ONLY``), the CUDA decoder (nvImageCodec ``GPU_ONLY`` or ``torchvision.io.decode_jpeg(list)``) and the
  CPU (simplejpeg into one pinned staging buffer, then a single host-to-device copy); the three run concurrently,
  each GPU path in one batched call; the CPU share is 0 unless asked for (it slowed every batch measured on the
  H200, see benchmarks/RESULTS.md);
* while the GPU decodes, a helper thread checks the entropy-coded data of the JPEGs sent to nvJPEG, the whole
  batch at once on the GPU (:class:`~sluice.backends.image.scan_check.BatchScanCheck`): nvJPEG decodes some
  damaged streams without an error, and those go to libjpeg-turbo in strict mode, which raises naming the file;
* 8-bit JPEG 2000 goes to nvJPEG2000 through nvImageCodec's CUDA decoder;
* anything a GPU path does not take (progressive, CMYK/YCCK, truncated JPEGs, PNG, TIFF, WebP, ...) is decoded on
  the CPU threads per sample; a sample the GPU returns nothing for is retried on the CPU.

Regions of interest (crop windows) are decoded as regions by nvImageCodec; EXIF orientation is applied on the
GPU after decoding the stored region that maps to the requested upright one.

Without an nvImageCodec decoder on the SMs (its CUDA 13 builds), torchvision's batched nvJPEG, which drives the
hardware engines itself, takes every JPEG (``engines_via_torchvision``). A pipeline decodes ahead: ``start`` runs
``decode`` in the background on a stream of the decoder's, two batches at a time, and ``finish`` hands the images
over to the pipeline's stream.

The batch lane (``start_batch`` / ``finish_jpegs``) takes a batch lying back to back in one buffer (readers.file's)
whatever files it holds, routed from its headers by :func:`~sluice.backends.image.batch_plan.plan_batch`: the
GPU's JPEGs in one torchvision call and one kernel that cuts their windows into their places in one output buffer,
the rest on the pipeline's threads at the same time (progressive JPEGs by libjpeg-turbo in the compiled core, the
other files one codec call each) into one page-locked staging buffer, placed by one copy and one kernel. No
per-sample Python runs in the pipeline's device stage; ``stats`` counts the samples of each path.

Example::

    dec = GpuImageDecoder(device_id=0)
    images = dec.decode([jpeg_bytes, png_bytes], output_type="RGB", thread_pool=pool)
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass

import numpy as np
import torch

from sluice.errors import SampleError
from sluice.kernels.crops import gather_hwc_crops
from sluice.native import jpeg as native_jpeg
from sluice.runtime import Runtime

from . import cpu
from .batch_plan import CODEC, CORE, GPU, BatchPlan
from .common import YCBCR_FROM_RGB, ImageDecodeError, apply_orientation, check_pixel_limit, roi_in_stored
from .formats import as_bytes
from .scan_check import BatchScanCheck
from .hybrid import HybridShare
from .scheduler import ShareTuner, SplitScheduler

__all__ = ["GpuImageDecoder", "to_output_type_gpu", "nvimgcodec_module", "gpu_eligible", "gpu_j2k_eligible"]

logger = logging.getLogger(__name__)

Roi = tuple[int, int, int, int]

#: Batches a pipeline's decoder works on at once when they are started ahead (GpuImageDecoder.start).
AHEAD_BATCHES = 2

#: CPU share of the GPU-decodable JPEGs where the decoder's ``cpu_load`` is None; the tuner moves it up to
#: MAX_CPU_LOAD when whole batches get faster.
DEFAULT_CPU_LOAD = 0.0
MAX_CPU_LOAD = 0.3
#: Whether the shares are hill-climbed on the measured batch speed where the decoder's ``adaptive`` is None.
ADAPTIVE = False
#: Whether nvImageCodec decodes where installed (False: torchvision's nvJPEG only).
USE_NVIMGCODEC = True
#: Where the entropy-coded data of the JPEGs sent to nvJPEG is checked (see scan_check.BatchScanCheck): "gpu",
#: "cpu", or None (not checked: 10-35 % faster, a damaged file may decode silently).
VALIDATE_SCANS: str | None = "gpu"

# torch.cuda, behind one name so that the scheduling and assembly logic can be exercised on the CPU in tests.
_cuda = torch.cuda


@contextlib.contextmanager
def quiet_stderr():
    """Send what C libraries print to stderr to /dev/null for the duration: nvImageCodec prints an error for every
    optional codec library it does not find (nvTIFF, nvJPEG2000) when it loads its extensions, although nothing
    sluice decodes needs them (the formats then decode on the CPU). Python's own ``sys.stderr`` is untouched."""
    try:
        saved = os.dup(2)
    except OSError:  # no stderr to redirect
        yield
        return
    try:
        with open(os.devnull, "wb") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def nvimgcodec_module():
    """``nvidia.nvimgcodec`` when installed (and :data:`USE_NVIMGCODEC`), else None."""
    if not USE_NVIMGCODEC:
        return None
    try:
        with quiet_stderr():
            from nvidia import nvimgcodec
    except ImportError:
        return None
    return nvimgcodec


def nvimgcodec_host_threads(num_cpu_threads: int) -> int:
    """nvImageCodec's own host threads (bitstream parsing for the hardware engines and nvJPEG's CPU stages):
    a quarter of the pipeline's threads, at least 2."""
    return max(2, num_cpu_threads // 4)


def _ends_with_eoi(buf: memoryview) -> bool:
    # A truncated JPEG lacks its EOI marker; nvJPEG may fill the missing part silently, libjpeg-turbo in strict
    # mode reports it, so such files go to the CPU. Some writers pad after EOI: look at the last 1 KiB.
    return bytes(buf[-1024:]).rfind(b"\xff\xd9") >= 0


def gpu_eligible(info: cpu.ImageInfo, output_type: str, buf: memoryview | None = None) -> bool:
    """Whether nvJPEG's batched GPU paths take this sample: a complete baseline/extended (not progressive) JPEG
    with 1 or 3 components, decoded to RGB, BGR, GRAY or YCbCr."""
    return (info.format == "jpeg" and info.jpeg is not None and not info.jpeg.progressive
            and info.jpeg.components in (1, 3) and output_type != "ANY_DATA"
            and (buf is None or _ends_with_eoi(buf)))


def gpu_j2k_eligible(info: cpu.ImageInfo, output_type: str) -> bool:
    """Whether nvImageCodec's CUDA JPEG 2000 decoder (nvJPEG2000) takes this sample: 8-bit, 1 or 3 channels."""
    return (info.format == "jpeg2000" and info.bit_depth == 8 and info.channels in (1, 3)
            and output_type != "ANY_DATA")


def to_output_type_gpu(image: torch.Tensor, output_type: str) -> torch.Tensor:
    """The torch twin of :func:`cpu.to_output_type` for RGB (3-channel) or gray (1-channel) HWC uint8 images."""
    c = image.shape[2]
    if output_type == "GRAY":
        if c == 1:
            return image
        w = torch.tensor(YCBCR_FROM_RGB[0], device=image.device, dtype=torch.float32)
        return (image[:, :, :3].float() @ w).round_().clamp_(0, 255).to(torch.uint8)[:, :, None]
    rgb = image if c == 3 else image[:, :, :1].expand(-1, -1, 3)
    if output_type in ("RGB", "ANY_DATA"):
        return rgb
    if output_type == "BGR":
        return rgb.flip(2)
    if output_type == "YCbCr":
        m = torch.tensor(YCBCR_FROM_RGB, device=image.device, dtype=torch.float32)
        ycc = rgb.float() @ m.T
        ycc[:, :, 1:] += 128.0
        return ycc.round_().clamp_(0, 255).to(torch.uint8)
    raise ValueError(f"Invalid output_type ({output_type!r}). Supported values are RGB, BGR, GRAY, YCbCr, ANY_DATA.")


def _batched_hwc(chw: list[torch.Tensor]) -> list[torch.Tensor]:
    """CHW images -> contiguous HWC views of one buffer, in two batched copies (a concatenation along the pixels,
    then one transpose) instead of a copy per image."""
    c = chw[0].shape[0]
    flat = torch.cat([t.reshape(c, -1) for t in chw], dim=1).t().contiguous()  # (all pixels, C)
    shapes = [t.shape for t in chw]
    parts = flat.split([s[1] * s[2] for s in shapes])  # views, made in one call
    return [p.view(s[1], s[2], c) for p, s in zip(parts, shapes)]


_nested_lock = threading.Lock()
_nested_ok: bool | None = None


def _nested_available() -> bool:
    """Whether torch's (strided) nested tensors work here. The first construction is made now, with the
    "prototype stage" warning it gives once per process silenced, rather than in a user's batch."""
    global _nested_ok
    with _nested_lock:
        if _nested_ok is None:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    probe = torch.nested.as_nested_tensor([torch.zeros(1, 2, 3, dtype=torch.uint8),
                                                           torch.ones(2, 1, 3, dtype=torch.uint8)])
                    parts = probe.unbind()
                _nested_ok = [tuple(t.shape) for t in parts] == [(1, 2, 3), (2, 1, 3)] and int(parts[1].sum()) == 6
            except Exception:  # noqa: BLE001 - a torch without them: a copy per image
                _nested_ok = False
    return _nested_ok


def _views_of_one_buffer(images: list[torch.Tensor]) -> bool:
    """Whether the images are contiguous views of one torch storage (one record_stream covers them all)."""
    base = images[0].untyped_storage().data_ptr()
    return all(t.is_contiguous() and t.untyped_storage().data_ptr() == base for t in images)


def one_allocation(images: list[torch.Tensor]) -> list[torch.Tensor]:
    """A decoded batch as contiguous images that share one allocation of torch's caching allocator.

    nvImageCodec's images live in its own allocator, which frees them in order on the decoding stream: a consumer
    on another stream that drops a batch before its kernels have read it could see the memory reused, and
    ``record_stream`` cannot protect memory torch did not allocate. Copied into one torch allocation (two calls for
    the whole batch, the per-image work in C++: a nested tensor, then its views), the batch is protected by one
    ``record_stream`` and the crop views of the hardware path become contiguous on the way. Mixed types or
    devices, or a torch without nested tensors: each image is made contiguous on its own."""
    first = images[0] if images else None
    same = (first is not None and len(images) > 1
            and all(t.dim() == 3 and t.dtype == first.dtype and t.device == first.device for t in images))
    if same and _views_of_one_buffer(images):  # torchvision's batch, made HWC in one buffer: nothing to do
        return list(images)
    if same and _nested_available():
        return list(torch.nested.as_nested_tensor(images).unbind())
    if len(images) == 1:  # may be nvImageCodec's memory: a copy in torch's allocator, as for larger batches
        return [images[0].clone(memory_format=torch.contiguous_format)]
    return [t if t.is_contiguous() else t.contiguous() for t in images]


def _pixels(info: cpu.ImageInfo, roi: Roi | None) -> int:
    return roi[2] * roi[3] if roi is not None else info.height * info.width


@dataclass
class StartedBatch:
    """A batch that :meth:`GpuImageDecoder.start` is decoding: its future and the checks it deferred."""

    future: Future
    checks: list[Callable[[], None]]


class GpuImageDecoder:
    """Decodes batches of encoded images into CUDA uint8 HWC tensors, sharing JPEGs between the hardware engines,
    the CUDA decoder and the CPU (see the module docstring).

    ``hw_decoder_load`` is the fraction of the GPU's JPEGs given to the hardware engines (DALI's meaning).
    ``cpu_load`` is the fraction of the JPEGs decoded by the CPU instead: by default (None) :data:`DEFAULT_CPU_LOAD`
    (none); a number fixes it. On the H200 every CPU share measured beside the overlapping torchvision calls made the
    side-by-side programs slower (share 0 against the rate-balanced share of about 0.16, one lease: `decode`
    22.4k against 19.5-20.1k images/s, `train` 20.9k against 17.9-20.1k): the cores that decode are those that
    read and parse the next batch. With ``adaptive=True`` (default: :data:`ADAPTIVE`) batches of plain JPEGs
    (:meth:`start_batch`) give the CPU the share that keeps it in step with the GPU
    (:class:`~sluice.backends.image.hybrid.HybridShare`), and the general path's shares are hill-climbed on the
    measured batch speed (off by default: the exploration cost more than it found).

    ``runtime``: the pipeline's :class:`~sluice.runtime.Runtime`, which makes this decoder's two pools (of its own,
    sized as here); None (a decoder made outside a pipeline): a runtime of its own, closed by :meth:`close`.
    """

    def __init__(self, device_id: int | torch.device = 0, *, hw_decoder_load: float = 0.9,
                 jpeg_fancy_upsampling: bool = False, use_fast_idct: bool = False, cpu_load: float | None = None,
                 adaptive: bool | None = None, num_cpu_threads: int = 4, runtime: Runtime | None = None):
        self.device = device_id if isinstance(device_id, torch.device) else torch.device("cuda", device_id)
        # the pipeline's runtime makes this decoder's threads; a decoder made outside a pipeline has one of its own
        self._own_runtime = runtime is None
        self._runtime = runtime if runtime is not None else Runtime(
            device_id=self.device.index if self.device.type == "cuda" else None, name="image decoder")
        self.use_fast_idct = use_fast_idct
        self._nv = nvimgcodec_module()
        self._hw = None
        self._cuda = None
        self._raw_inputs = True  # nvImageCodec takes NumPy arrays as code streams (older versions: CodeStream)
        if self._nv is not None:
            nv = self._nv
            options = f":fancy_upsampling={int(bool(jpeg_fancy_upsampling))}"
            host_threads = nvimgcodec_host_threads(num_cpu_threads)
            for kinds in ([nv.Backend(nv.BackendKind.HW_GPU_ONLY, load_hint=1.0), nv.Backend(nv.BackendKind.GPU_ONLY)],
                          [nv.Backend(nv.BackendKind.HW_GPU_ONLY)]):
                try:
                    with quiet_stderr():
                        self._hw = nv.Decoder(device_id=self.device.index, max_num_cpu_threads=host_threads,
                                              options=options, backends=kinds)
                    break
                except Exception as exc:  # noqa: BLE001 - no hardware engine on this GPU
                    logger.info("nvImageCodec hardware JPEG decoder unavailable (%s)", exc)
            try:
                with quiet_stderr():
                    self._cuda = nv.Decoder(device_id=self.device.index, max_num_cpu_threads=host_threads,
                                            options=options, backends=[nv.Backend(nv.BackendKind.GPU_ONLY)])
            except Exception as exc:  # noqa: BLE001 - e.g. "Could not create decoder": torchvision takes over
                logger.info("nvImageCodec CUDA JPEG decoder unavailable (%s); using torchvision's nvJPEG", exc)
        has_hw = self._hw is not None and self._hw_works()
        if not has_hw:
            self._hw = None
        if self._cuda is not None and not self._decodes(self._cuda):
            # nvImageCodec 0.9 with an nvJPEG newer than the driver creates its SM decoder, which then returns no
            # image at all ("Something went wrong during decoding image #N"): found once here, not per batch
            logger.info("nvImageCodec's CUDA JPEG decoder returns no images here; torchvision's nvJPEG decodes "
                        "instead")
            self._cuda = None
        #: torchvision's batched nvJPEG drives the hardware JPEG engines itself where the GPU has them
        #: (nvjpegCreateEx with NVJPEG_BACKEND_HARDWARE). Without an nvImageCodec decoder on the SMs there is then
        #: no second kind of GPU decoder to share the JPEGs with: splitting them between nvImageCodec's and
        #: torchvision's calls only queues both on the same engines (measured on the H200: no faster than either
        #: alone), and torchvision's tensors come out cheaper than nvImageCodec's images (a DLPack conversion per
        #: image: 23.6k -> 17.4k images/s). So torchvision decodes them all, and nvImageCodec's hardware path
        #: stands by for batches torchvision fails on; ``hw_decoder_load`` has no effect then.
        self.engines_via_torchvision = has_hw and self._cuda is None
        fixed = cpu_load
        cpu_load = DEFAULT_CPU_LOAD if fixed is None else float(fixed)
        if not 0.0 <= hw_decoder_load <= 1.0:
            raise ValueError(f"Invalid hw_decoder_load ({hw_decoder_load}). It must lie in [0, 1].")
        if not 0.0 <= cpu_load <= 1.0:
            raise ValueError(f"Invalid cpu_load ({cpu_load}). It must lie in [0, 1].")
        if adaptive is None:
            adaptive = ADAPTIVE
        # The CPU's share of the JPEGs and the hardware engines' share of the GPU's are hill-climbed on the
        # measured speed of whole batches (decode calls), one tuner at a time: CPU decoding competes with the GPU
        # decoders' host threads for cores and the GIL, so finishing together is not the same as finishing soon.
        self.cpu_tuner = ShareTuner(cpu_load, hi=max(cpu_load, MAX_CPU_LOAD)) if adaptive else None
        split_hw = has_hw and not self.engines_via_torchvision
        self.hw_tuner = ShareTuner(hw_decoder_load, step=0.2, min_step=0.05) if split_hw and adaptive else None
        self._tuners = [t for t in (self.cpu_tuner, self.hw_tuner) if t is not None]
        self._active_tuner = 0
        self._cpu_share = cpu_load
        self._hw_share = hw_decoder_load if split_hw else 0.0
        #: Check the entropy-coded data of the JPEGs sent to nvJPEG (:data:`VALIDATE_SCANS`).
        where = VALIDATE_SCANS
        self.validate_scans = where is not None
        self._scan_check = BatchScanCheck(self.device, "cpu" if where == "cpu" else "gpu", runtime=self._runtime)
        # One thread per GPU path (hardware, CUDA, JPEG 2000) and for the scan checks of this batch and of
        # batches whose checks are still in flight (deferred to the pipeline's output).
        self._gpu_threads = self._runtime.thread_pool("gpu-decode", 4 * AHEAD_BATCHES)
        # Batches decoded ahead (``start``), two at a time so that one's host work (routing, the CPU share,
        # assembling) overlaps the other's GPU decoding; each on one of two streams of their own.
        self._ahead = self._runtime.thread_pool("decode-ahead", AHEAD_BATCHES)
        self._ahead_streams: list = []
        self._nv_locks = {"hw": threading.Lock(), "cuda": threading.Lock()}
        # Completion time of the last torchvision call of start_batch: the batches started ahead call it at the same
        # time (two calls overlap their host and device phases: 17.1k -> 20.5k images/s on the H200), so a call's
        # own duration overstates its cost; its share is the time since the previous call ended.
        self._tv_clock = threading.Lock()
        self._tv_last_end = 0.0
        #: the CPU's share of the batch lane's GPU JPEGs (start_batch)
        self.hybrid = HybridShare(fixed=None if adaptive and fixed is None else cpu_load)
        self._started = 0
        self._last_end: float | None = None
        self._hw_failures = 0
        #: How the last batch was split: by :meth:`decode` ('hw', 'cuda', 'cpu', 'j2k') or by :meth:`start_batch`
        #: ('gpu', 'cpu_core', 'cpu_codec'), samples per path.
        self.last_split: dict[str, int] = {}
        #: Counters: batches and samples by path. ``lane_*``: :meth:`start_batch` (the batch lane: ``lane_gpu``
        #: samples in its batched GPU call, ``lane_cpu_core`` by the compiled core, ``lane_cpu_codec`` by a codec
        #: call each); ``general_*``: :meth:`decode` (``general_gpu`` samples on a GPU path, ``general_cpu`` on the
        #: CPU); ``gpu_batch_failures``, ``cpu_retries``: GPU calls that failed, samples retried on the CPU.
        self.stats = {"lane_batches": 0, "lane_gpu": 0, "lane_cpu_core": 0, "lane_cpu_codec": 0,
                      "general_batches": 0, "general_gpu": 0, "general_cpu": 0,
                      "gpu_batch_failures": 0, "cpu_retries": 0}
        self._stats_lock = threading.Lock()

    @property
    def shares(self) -> dict[str, float]:
        """The shares of the next batch's GPU-decodable JPEGs: 'hw', 'cuda' (fractions of the GPU's part),
        'gpu' and 'cpu' (fractions of all)."""
        cpu_share = self.cpu_tuner.value if self.cpu_tuner is not None else self._cpu_share
        hw = self.hw_tuner.value if self.hw_tuner is not None else self._hw_share
        return {"gpu": 1.0 - cpu_share, "cpu": cpu_share, "hw": hw, "cuda": 1.0 - hw}

    def _record_rate(self, rate: float) -> None:
        if self._tuners and rate > 0:
            tuner = self._tuners[self._active_tuner % len(self._tuners)]
            if tuner.record(rate):
                self._active_tuner += 1

    @property
    def backend_name(self) -> str:
        """Which GPU library decodes: 'nvImageCodec (hardware + CUDA)', 'nvImageCodec (CUDA)' or 'torchvision'."""
        cuda = "CUDA nvJPEG" if self._cuda is not None else "torchvision.io.decode_jpeg (nvJPEG)"
        if self._nv is None:
            return "torchvision.io.decode_jpeg (nvJPEG)"
        if self.engines_via_torchvision:
            return "torchvision.io.decode_jpeg (nvJPEG on the hardware engines; nvImageCodec's as fallback)"
        return f"nvImageCodec (hardware JPEG + {cuda})" if self._hw is not None else f"nvImageCodec ({cuda})"

    def _hw_works(self) -> bool:
        """Whether the hardware JPEG engines decode (a decoder limited to them returns an image)."""
        nv = self._nv
        try:
            with quiet_stderr():
                only_hw = nv.Decoder(device_id=self.device.index, backends=[nv.Backend(nv.BackendKind.HW_GPU_ONLY)])
        except Exception as exc:  # noqa: BLE001
            logger.info("hardware JPEG decoding is unavailable (%s); using CUDA nvJPEG only", exc)
            return False
        return self._decodes(only_hw)

    @staticmethod
    def _decodes(decoder) -> bool:
        """Whether an nvImageCodec decoder returns an image for a small plain JPEG."""
        import simplejpeg

        probe_img = simplejpeg.encode_jpeg(np.full((256, 256, 3), 128, np.uint8), quality=90,
                                           colorsubsampling="420")
        try:
            with quiet_stderr():
                out = decoder.decode([probe_img])
            return bool(out) and out[0] is not None
        except Exception as exc:  # noqa: BLE001
            logger.info("an nvImageCodec decoder failed on a plain JPEG (%s); not using it", exc)
            return False

    # --- the GPU paths ---------------------------------------------------------------------------------------
    def _source(self, buf: memoryview, roi: Roi | None):
        """A code stream (or, in nvImageCodec < 0.5, a DecodeSource) for one sample, restricted to ``roi``."""
        nv = self._nv
        try:
            cs = nv.CodeStream(np.frombuffer(buf, np.uint8))
        except Exception:  # noqa: BLE001 - versions that take only bytes
            cs = nv.CodeStream(bytes(buf))
        if roi is None:
            return cs
        y, x, h, w = roi
        try:
            region = nv.Region(start_y=y, start_x=x, end_y=y + h, end_x=x + w)
        except TypeError:
            region = nv.Region([y, x], [y + h, x + w])
        if hasattr(cs, "get_sub_code_stream"):
            try:
                return cs.get_sub_code_stream(region=region)
            except TypeError:
                return cs.get_sub_code_stream(nv.CodeStreamView(image_idx=0, region=region))
        return nv.DecodeSource(cs, region)

    def _decode_nvimgcodec(self, decoder, bufs: list[memoryview], rois: list[Roi | None], gray: bool,
                           stream: torch.cuda.Stream) -> list[torch.Tensor | None]:
        nv = self._nv
        rgb = getattr(nv.ColorSpec, "RGB", None) or nv.ColorSpec.SRGB  # SRGB since nvImageCodec 0.6
        params = nv.DecodeParams(color_spec=nv.ColorSpec.GRAY if gray else rgb,
                                 allow_any_depth=False, apply_exif_orientation=False)
        # The hardware JPEG engines decode whole images only (nvJPEG's hardware backend has no region decode):
        # decode them whole and cut the window out on the GPU, rather than let the region requests fail over.
        crop_after = decoder is self._hw and any(r is not None for r in rois)
        if crop_after:
            rois, windows = [None] * len(rois), rois
        images = None
        if self._raw_inputs and all(r is None for r in rois):
            try:  # NumPy views of the encoded bytes: no per-sample CodeStream objects built in Python
                images = decoder.decode([np.frombuffer(b, np.uint8) for b in bufs], params=params,
                                        cuda_stream=stream.cuda_stream)
            except TypeError:
                self._raw_inputs = False
        if images is None:
            srcs = [self._source(buf, roi) for buf, roi in zip(bufs, rois)]
            images = decoder.decode(srcs, params=params, cuda_stream=stream.cuda_stream)
        out = []
        for img in images:
            if img is None:
                out.append(None)
                continue
            t = torch.from_dlpack(img)
            out.append(t if t.dim() == 3 else t[:, :, None])
        if crop_after:
            out = [t if t is None or w is None else t[w[0]:w[0] + w[2], w[1]:w[1] + w[3]]
                   for t, w in zip(out, windows)]
        return out

    def _decode_torchvision(self, bufs: list[memoryview], rois: list[Roi | None], gray: bool,
                            stream: torch.cuda.Stream) -> list[torch.Tensor | None]:
        from torchvision.io import ImageReadMode, decode_jpeg

        data = []
        for b in bufs:
            a = np.frombuffer(b, np.uint8)
            data.append(torch.from_numpy(a if a.flags.writeable else a.copy()))
        chw = decode_jpeg(data, mode=ImageReadMode.GRAY if gray else ImageReadMode.RGB, device=self.device)
        if chw and all(r is None for r in rois):
            return _batched_hwc(chw)
        out = []
        for t, roi in zip(chw, rois):
            hwc = t.permute(1, 2, 0)
            if roi is not None:
                y, x, h, w = roi
                hwc = hwc[y:y + h, x:x + w]
            out.append(hwc)
        return out

    def _decode_on(self, path: str, bufs, rois, gray: bool, stream) -> list[torch.Tensor | None]:
        if self._nv is not None and (path == "hw" or self._cuda is not None):
            decoder = self._hw if path == "hw" else self._cuda  # "cuda" and "j2k"
            # Batches started ahead are decoded two at a time; an nvImageCodec decoder takes one call at once
            # (torchvision's decoder holds a lock of its own).
            with self._nv_locks["hw" if path == "hw" else "cuda"]:
                return self._decode_nvimgcodec(decoder, bufs, rois, gray, stream)
        return self._decode_torchvision(bufs, rois, gray, stream)

    def _run_gpu_path(self, path: str, bufs, rois, gray: bool, stream: torch.cuda.Stream,
                      finish) -> list[torch.Tensor | None]:
        """Decode on one GPU path, ordered on ``stream`` (the pipeline's), and ``finish`` each image (orientation,
        colour space, contiguous HWC) in this thread, so that the paths' per-sample work overlaps. nvImageCodec
        allocates and frees its images in order on that stream too, so a freed image cannot be reused while the
        pipeline still reads it. Returns once the work is queued: the GPU finishes it while the next batch is
        parsed (waiting here would serialise the two)."""
        with _cuda.device(self.device), _cuda.stream(stream):
            try:
                out = self._decode_on(path, bufs, rois, gray, stream)
            except Exception as exc:  # noqa: BLE001 - the CPU retries each sample and names the bad file
                self.stats["gpu_batch_failures"] += 1
                log = logger.warning if self.stats["gpu_batch_failures"] == 1 else logger.debug
                log("%s: the %s path failed on a batch of %d (%s: %s); decoding those on the %s",
                    self.backend_name, path, len(bufs), type(exc).__name__, exc,
                    "CUDA decoder" if path == "hw" else "CPU")
                out = [None] * len(bufs)
                if path == "cuda" and self.engines_via_torchvision and self._hw is not None:
                    try:
                        out = self._decode_on("hw", bufs, rois, gray, stream)
                    except Exception as exc2:  # noqa: BLE001 - the CPU retries
                        logger.debug("nvImageCodec's hardware path failed on that batch too (%s)", exc2)
                elif path == "hw":
                    self._hw_failures += 1
                    if self._hw_failures >= 3:  # give the engines' share to the CUDA decoder from now on
                        logger.warning("%s: the hardware JPEG path failed %d times; not using it any more",
                                       self.backend_name, self._hw_failures)
                        self._hw_share, self.hw_tuner = 0.0, None
                        self._tuners = [self.cpu_tuner] if self.cpu_tuner is not None else []
                    try:
                        out = self._decode_on("cuda", bufs, rois, gray, stream)
                    except Exception as exc2:  # noqa: BLE001 - the CPU retries
                        logger.debug("the CUDA decoder failed on that batch too (%s); the CPU retries it", exc2)
            out = finish(out)
        return out

    # --- the CPU paths ---------------------------------------------------------------------------------------
    @staticmethod
    def _cpu_jpeg_into(buf, info: cpu.ImageInfo, out: np.ndarray, output_type: str, adjust_orientation: bool,
                       roi: Roi | None, fast_idct: bool, source: str) -> None:
        direct = {"RGB": "RGB", "BGR": "BGR", "GRAY": "GRAY"}.get(output_type)
        plain = direct and roi is None and (not adjust_orientation or info.orientation == 1)
        if plain:  # libjpeg-turbo writes straight into the pinned staging buffer
            cpu.decode_jpeg_into(buf, out, colorspace=direct, use_fast_idct=fast_idct, source=source)
        else:
            out[...] = cpu.decode(buf, output_type=output_type, adjust_orientation=adjust_orientation,
                                  use_fast_idct=fast_idct, roi=roi, info=info, source=source)

    def decode(self, data: Sequence, *, output_type: str = "RGB", adjust_orientation: bool = True,
               rois: Sequence[Roi | None] | None = None, infos: Sequence[cpu.ImageInfo] | None = None,
               sources: Sequence[str] | None = None, thread_pool: Executor | None = None,
               stream: torch.cuda.Stream | None = None,
               defer: Callable[[Callable[[], None]], None] | None = None,
               region: torch.Tensor | None = None) -> list[torch.Tensor]:
        """Decode a batch. ``rois`` are (y, x, h, w) windows of the upright images; ``infos`` the probes (made
        here when absent). Returns CUDA HWC tensors (uint8; uint16 for 16-bit non-JPEG sources) on ``stream``
        (default: the current stream).

        The scan check of the JPEGs sent to nvJPEG finishes on the GPU after this returns. Without ``defer`` it
        is waited for here and flagged streams are decoded again on the CPU. With ``defer`` (a pipeline's
        ``BatchContext.defer``) the wait is handed over: the check raises, naming the file, when a flagged
        stream proves damaged, before the batch reaches the caller. ``region``: the batch's bytes back to back in
        one tensor (readers.file's page-locked batch buffer), which the scan check copies as it is."""
        n = len(data)
        stream = stream or _cuda.current_stream(self.device)
        sources = list(sources) if sources is not None else [""] * n
        rois = list(rois) if rois is not None else [None] * n
        bufs = [as_bytes(d) for d in data]
        infos = list(infos) if infos is not None else [cpu.probe(b, source=s) for b, s in zip(bufs, sources)]
        out: list[torch.Tensor | None] = [None] * n

        eligible = [i for i in range(n) if gpu_eligible(infos[i], output_type, bufs[i])]
        # JPEG 2000 goes to nvJPEG2000 (through nvImageCodec's CUDA decoder) outside the JPEG split.
        j2k = [i for i in range(n) if self._cuda is not None and gpu_j2k_eligible(infos[i], output_type)]
        for i in eligible + j2k:
            check_pixel_limit(infos[i].height, infos[i].width, source=sources[i], decoder=self.backend_name)
        others = sorted(set(range(n)) - set(eligible) - set(j2k))
        weights = [_pixels(infos[i], rois[i]) for i in eligible]
        shares = self.shares
        split = {"hw": shares["gpu"] * shares["hw"], "cuda": shares["gpu"] * shares["cuda"], "cpu": shares["cpu"]}
        split = {k: v for k, v in split.items() if v > 0} or {"cuda": 1.0}
        groups: dict[str, list[int]] = {"hw": [], "cuda": [], "cpu": [], "j2k": j2k}
        if len(split) == 1:  # one path takes all: no dealing
            groups[next(iter(split))].extend(eligible)
        else:
            for i, p in zip(eligible, SplitScheduler(split, adaptive=False).assign(weights)):
                groups[p].append(i)
        self.last_split = {k: len(v) for k, v in groups.items()}
        with self._stats_lock:
            self.stats["general_batches"] += 1
            self.stats["general_gpu"] += n - len(groups["cpu"]) - len(others)
            self.stats["general_cpu"] += len(groups["cpu"]) + len(others)
        gray = output_type == "GRAY"

        def finish(idx: list[int], tensors: list) -> list:
            if output_type in ("RGB", "GRAY") and not (adjust_orientation and any(infos[i].orientation != 1
                                                                                  for i in idx)):
                return tensors  # crop views are made contiguous with the whole batch, at the end
            done = []
            for i, t in zip(idx, tensors):
                if t is not None:
                    o = infos[i].orientation if adjust_orientation else 1
                    t = apply_orientation(t, o) if o != 1 else t
                    if output_type not in ("RGB", "GRAY"):
                        t = to_output_type_gpu(t, output_type)
                    t = t.contiguous()
                done.append(t)
            return done

        def gpu_job(path: str):
            idx = groups[path]
            stored = []  # stored-image regions: orientation is applied after decoding
            for i in idx:
                info, roi = infos[i], rois[i]
                o = info.orientation if adjust_orientation else 1
                if roi is not None and o != 1:
                    roi = roi_in_stored(roi, o, info.height, info.width)
                stored.append(roi)
            return self._run_gpu_path(path, [bufs[i] for i in idx], stored, gray, stream,
                                      lambda tensors: finish(idx, tensors))

        gpu_futures = {p: self._gpu_threads.submit(gpu_job, p) for p in ("hw", "cuda", "j2k") if groups[p]}
        on_gpu = groups["hw"] + groups["cuda"]
        # nvJPEG decodes some damaged streams without an error: those whose entropy-coded data holds markers that
        # cannot be there are decoded again by libjpeg-turbo (strict), which names the damage.

        def scan_on_gpu() -> list[bool]:
            if region is not None:  # the whole batch as it lies in memory; only the GPU's streams are read back
                ok = self._scan_check(bufs, region=region)
                return [ok[i] for i in on_gpu]
            return self._scan_check([bufs[i] for i in on_gpu])

        scan_future = self._gpu_threads.submit(scan_on_gpu) if self.validate_scans and on_gpu else None

        # CPU share of the eligible JPEGs: decode into one pinned buffer, then one copy.
        cpu_idx = groups["cpu"]
        cpu_shapes, offsets, total = [], [], 0
        channels = 1 if gray else 3
        for i in cpu_idx:
            info, roi = infos[i], rois[i]
            h, w = (roi[2], roi[3]) if roi is not None else info.shape(adjust_orientation)[:2]
            cpu_shapes.append((h, w, channels))
            offsets.append(total)
            total += h * w * channels
        staging = (torch.empty(total, dtype=torch.uint8, pin_memory=self.device.type == "cuda")
                   if total else None)

        def cpu_jpeg(k: int) -> None:
            i = cpu_idx[k]
            h, w, c = cpu_shapes[k]
            view = staging[offsets[k]:offsets[k] + h * w * c].numpy().reshape(h, w, c)
            self._cpu_jpeg_into(bufs[i], infos[i], view, output_type, adjust_orientation, rois[i],
                                self.use_fast_idct, sources[i])

        def cpu_other(i: int) -> np.ndarray:
            return cpu.decode(bufs[i], output_type=output_type, adjust_orientation=adjust_orientation,
                              use_fast_idct=self.use_fast_idct, roi=rois[i], info=infos[i], source=sources[i])

        run = thread_pool.map if thread_pool is not None else map
        first_error: BaseException | None = None
        suspect: list[int] = []
        try:
            list(run(cpu_jpeg, range(len(cpu_idx))))
            other_arrays = list(run(cpu_other, others))
        except BaseException as exc:  # noqa: BLE001 - wait for the GPU threads before re-raising
            first_error, other_arrays = exc, []

        gpu_results = {}
        for p, fut in gpu_futures.items():
            try:
                gpu_results[p] = fut.result()
            except BaseException as exc:  # noqa: BLE001
                first_error = first_error or exc
        if scan_future is not None and defer is None:
            try:
                suspect = [i for i, ok in zip(on_gpu, scan_future.result()) if not ok]
            except BaseException as exc:  # noqa: BLE001
                first_error = first_error or exc
        if first_error is not None:
            raise first_error
        if scan_future is not None and defer is not None:
            def confirm_suspects() -> None:
                # A stream the check flags is decoded again by libjpeg-turbo (strict), which raises naming the
                # file when the stream is damaged; one that decodes cleanly keeps the GPU's output.
                for i, ok in zip(on_gpu, scan_future.result()):
                    if not ok:
                        cpu_other(i)
            defer(confirm_suspects)

        with _cuda.device(self.device), _cuda.stream(stream):
            if staging is not None:
                dev = staging.to(self.device, non_blocking=True)
                for k, i in enumerate(cpu_idx):
                    h, w, c = cpu_shapes[k]
                    out[i] = dev[offsets[k]:offsets[k] + h * w * c].view(h, w, c)
            for i, arr in zip(others, other_arrays):
                out[i] = torch.from_numpy(arr).to(self.device, non_blocking=False)
            retry = list(suspect)
            for p, tensors in gpu_results.items():
                for i, t in zip(groups[p], tensors):
                    if t is None:
                        retry.append(i)
                    elif out[i] is None and i not in suspect:
                        out[i] = t
            if retry:
                self.stats["cpu_retries"] += len(retry)
                logger.debug("the GPU returned nothing for %d samples; decoding them on the CPU", len(retry))
                for i, arr in zip(retry, run(cpu_other, retry)):
                    out[i] = torch.from_numpy(arr).to(self.device)
        # Steady-state speed: pixels over the time since the previous batch was handed out. GPU work is not
        # waited for here, so a GPU that falls behind shows up as later calls blocking in the decoders.
        now = time.perf_counter()
        if eligible and self._last_end is not None and now - self._last_end < 10.0:
            self._record_rate(sum(weights) / max(now - self._last_end, 1e-9))
        self._last_end = now
        missing = [i for i in range(n) if out[i] is None]
        if missing:  # pragma: no cover - every branch above fills its samples
            raise ImageDecodeError("internal error: no output", source=sources[missing[0]], decoder=self.backend_name)
        with _cuda.device(self.device), _cuda.stream(stream):
            return one_allocation(out)  # type: ignore[arg-type]

    @property
    def takes_whole_jpeg_batches(self) -> bool:
        """Whether :meth:`start_batch` decodes batches here: on a CUDA device, with torchvision's batched nvJPEG
        taking the GPU's part (no nvImageCodec decoder on the SMs to share the JPEGs with), the shares not
        hill-climbed (``adaptive``)."""
        return self.device.type == "cuda" and (self._nv is None or self.engines_via_torchvision) and not self._tuners

    def current_stream(self):
        """The caller's current stream on the decoder's device (the pipeline's, in its device stage)."""
        return _cuda.current_stream(self.device)

    def _ahead_stream(self):
        if not self._ahead_streams:
            self._ahead_streams = [self._runtime.stream(f"image decoder {id(self)}: ahead {k}", device=self.device)
                                   for k in range(AHEAD_BATCHES)]
        stream = self._ahead_streams[self._started % AHEAD_BATCHES]
        self._started += 1
        return stream

    def start_batch(self, plan: BatchPlan, pool=None, threads: int = 0) -> StartedBatch:
        """Begin decoding a routed batch (:func:`~sluice.backends.image.batch_plan.plan_batch`, its ``windows``
        set) in the background, into HWC crops of the windows back to back in one buffer, in sample order.

        The GPU's JPEGs go to torchvision's batched nvJPEG in one call, read where they lie in the plan's region,
        and one kernel cuts their windows into their places in the output (EXIF-rotated ones are turned after).
        At the same time ``pool``'s threads (the pipeline's, ``threads`` of them) decode the rest: the core's
        JPEGs by libjpeg-turbo in the compiled core (GIL released), the others one codec call each, all into one
        page-locked staging buffer that reaches the GPU in one copy and its places in the output in one more
        kernel. With ``pool``, the last upright GPU JPEGs may go to the core too, in the share
        :class:`~sluice.backends.image.hybrid.HybridShare` keeps in step with the two paths' rates.
        :meth:`finish_jpegs` hands the buffer over. A sample the CPU cannot decode raises SampleError naming it
        and its file; any other failure means: decode the batch the general way."""
        stream = self._ahead_stream()
        n, c = plan.n, plan.channels
        windows = np.ascontiguousarray(plan.windows, dtype=np.int64).reshape(n, 4)
        route = plan.route.copy()
        upright_gpu = np.flatnonzero((route == GPU) & (plan.orientation == 1))
        workers = threads // 2
        share = (self.hybrid.cpu_count(len(upright_gpu))
                 if pool is not None and workers >= 1 and self.core_decodes_jpeg() else 0)
        if share:
            route[upright_gpu[len(upright_gpu) - share:]] = CORE
        out_sizes = windows[:, 2] * windows[:, 3] * c
        out_offsets = np.zeros(n + 1, np.int64)
        np.cumsum(out_sizes, out=out_offsets[1:])
        gpu_idx = np.flatnonzero(route == GPU)
        cpu_idx = np.concatenate([np.flatnonzero(route == CORE), np.flatnonzero(route == CODEC)])
        core_count = int((route == CORE).sum())
        with self._stats_lock:
            self.stats["lane_batches"] += 1
            self.stats["lane_gpu"] += len(gpu_idx)
            self.stats["lane_cpu_core"] += core_count
            self.stats["lane_cpu_codec"] += len(cpu_idx) - core_count
        self.last_split = {"gpu": len(gpu_idx), "cpu_core": core_count, "cpu_codec": len(cpu_idx) - core_count}

        def work():
            host = (self._decode_cpu_part(plan, windows, cpu_idx, core_count, out_sizes, pool, max(1, threads))
                    if len(cpu_idx) else None)
            total = int(out_offsets[-1])
            with _cuda.device(self.device), _cuda.stream(stream):
                gpu_seconds, buf = self._decode_gpu_part(plan, windows, gpu_idx, out_offsets, stream)
                cpu_seconds = 0.0
                if host is not None:
                    staging, cpu_seconds = host()
                    pieces = staging.to(self.device, non_blocking=True)
                    self._place(pieces, out_sizes[cpu_idx], buf, out_offsets[cpu_idx])
                done = _cuda.Event()
                done.record(stream)
            self.hybrid.record(len(gpu_idx), gpu_seconds, len(cpu_idx), cpu_seconds)
            return buf[:total], out_sizes.tolist(), done
        return StartedBatch(self._ahead.submit(work), [])

    @staticmethod
    def _place(pieces: torch.Tensor, sizes: np.ndarray, out: torch.Tensor, offsets: np.ndarray) -> None:
        """Copy the pieces lying back to back in ``pieces`` (``sizes`` bytes each) to ``offsets`` in ``out``, in one
        kernel (each piece a one-row, one-channel image for :func:`~sluice.kernels.crops.gather_hwc_crops`)."""
        sizes = np.asarray(sizes, np.int64)
        rows = list(pieces[: int(sizes.sum())].view(1, 1, -1).split(sizes.tolist(), dim=2))
        lines = np.zeros((len(sizes), 4), np.int64)
        lines[:, 2], lines[:, 3] = 1, sizes
        gather_hwc_crops(rows, lines, out=out, offsets=offsets)

    def _decode_gpu_chw(self, parts: list[torch.Tensor], gray: bool) -> list[torch.Tensor]:
        """torchvision's batched nvJPEG: the CHW images of the JPEGs ``parts`` (CPU uint8 tensors), on the GPU."""
        from torchvision.io import ImageReadMode

        mode = (ImageReadMode.GRAY if gray else ImageReadMode.RGB).value
        return torch.ops.image.decode_jpegs_cuda.default(parts, mode, self.device)

    def _decode_gpu_part(self, plan: BatchPlan, windows: np.ndarray, idx: np.ndarray, out_offsets: np.ndarray,
                         stream) -> tuple[float, torch.Tensor]:
        """Decode samples ``idx`` with one batched GPU call and cut their windows into their places in a new output
        buffer (an EXIF-rotated one's stored window after the batch's end, then turned into place); returns the
        seconds the GPU call cost (from its start, or from the end of the call before it where the two
        overlapped) and the buffer."""
        total = int(out_offsets[-1])
        c = plan.channels
        cut, places = windows[idx], out_offsets[idx].copy()
        turned = np.flatnonzero(plan.orientation[idx] != 1).tolist()
        side = int((cut[turned, 2] * cut[turned, 3]).sum()) * c
        buf = torch.empty(max(1, total + side), dtype=torch.uint8, device=self.device)
        if not len(idx):
            return 0.0, buf
        parts = plan.region[: int(plan.sizes.sum())].split(plan.sizes.tolist())
        start = time.perf_counter()
        chw = self._decode_gpu_chw([parts[i] for i in idx.tolist()], c == 1)
        with self._tv_clock:
            end = time.perf_counter()
            seconds = end - max(start, self._tv_last_end)
            self._tv_last_end = end
        at = total
        for k in turned:  # EXIF-rotated: the stored window, placed after the batch's end, turned below
            i = int(idx[k])
            cut[k] = roi_in_stored(tuple(windows[i].tolist()), int(plan.orientation[i]), *plan.stored[i].tolist())
            places[k], at = at, at + int(cut[k, 2] * cut[k, 3]) * c
        gather_hwc_crops(chw, cut, out=buf, offsets=places)
        for k in turned:
            i, (_, _, hs, ws), place = int(idx[k]), cut[k].tolist(), int(places[k])
            h, w = int(windows[i, 2]), int(windows[i, 3])
            stored = buf[place: place + hs * ws * c].view(hs, ws, c)
            buf[int(out_offsets[i]): int(out_offsets[i]) + h * w * c].view(h, w, c).copy_(
                apply_orientation(stored, int(plan.orientation[i])))
        return seconds, buf

    def _decode_cpu_part(self, plan: BatchPlan, windows: np.ndarray, idx: np.ndarray, core_count: int,
                         out_sizes: np.ndarray, pool, tasks: int):
        """Start decoding samples ``idx`` (the first ``core_count`` by the compiled core, the others by a codec call
        each) on up to ``tasks`` of ``pool``'s threads into a page-locked staging buffer, back to back in the order
        of ``idx``; returns a function that waits and gives ``(staging, seconds)``, raising SampleError naming the
        first sample (by index) that could not be decoded. A JPEG the core fails on is decoded again by the codec,
        whose error names the damage (or whose image is kept)."""
        c = plan.channels
        sizes = out_sizes[idx]
        local = np.zeros(len(idx), np.int64)
        np.cumsum(sizes[:-1], out=local[1:])
        staging = torch.empty(max(1, int(sizes.sum())), dtype=torch.uint8, pin_memory=self.device.type == "cuda")
        out = staging.numpy()
        core_idx = idx[:core_count]
        host = plan.region.numpy()
        data = [host[a: a + b] for a, b in zip(plan.offsets[core_idx].tolist(), plan.sizes[core_idx].tolist())]
        core_windows = np.ascontiguousarray(windows[core_idx])
        core_local = np.ascontiguousarray(local[:core_count])
        status = np.full(core_count, -1, np.int32)
        counter = np.zeros(1, np.int64)
        codec_items = iter(range(core_count, len(idx)))  # next() on it is atomic under the GIL
        lock = threading.Lock()
        errors: dict[int, BaseException] = {}

        def codec(k: int) -> None:
            i = int(idx[k])
            y, x, h, w = (int(v) for v in windows[i])
            try:
                arr = cpu.decode(plan.sample_bytes(i), output_type=plan.output_type,
                                 adjust_orientation=plan.adjust_orientation, use_fast_idct=self.use_fast_idct,
                                 roi=(y, x, h, w), info=plan.infos[i], source=plan.sources[i])
                if arr.dtype == np.uint16:  # 16-bit PNG/TIFF/PNM to the uint8 output, as convert_image_dtype does
                    arr = ((arr.astype(np.int32) + 128) // 257).astype(np.uint8)
                if arr.shape != (h, w, c):
                    raise ImageDecodeError(f"decoded to {arr.shape}, expected {(h, w, c)}",
                                           source=plan.sources[i], decoder=cpu.JPEG_DECODER)
                out[int(local[k]): int(local[k]) + h * w * c].reshape(h, w, c)[...] = arr
            except Exception as exc:  # noqa: BLE001 - raised by the waiter, the lowest sample first
                with lock:
                    errors[i] = exc

        def task():
            failed = []
            if core_count:
                colorspace = "GRAY" if c == 1 else "RGB"
                failed = native_jpeg.decode(data, core_windows, colorspace, self.use_fast_idct, out, core_local,
                                            status, counter)
            for k in codec_items:
                codec(k)
            return failed, time.perf_counter()

        start = time.perf_counter()
        futures = [pool.submit(task) for _ in range(min(tasks, len(idx)))] if pool is not None else []

        def wait():
            results = [task()] if pool is None else [fut.result() for fut in futures]
            for k, _ in (f for r, _ in results for f in r):
                codec(int(k))  # the core's failures, decoded again by the codec
            # Until the last task ended: timed from the wait, a CPU part that finished first would measure the GPU
            # call's time.
            seconds = max(end for _, end in results) - start
            if errors:
                i = min(errors)
                raise SampleError(i, plan.sources[i], errors[i]) from errors[i]
            return staging, seconds
        return wait

    @staticmethod
    def core_decodes_jpeg() -> bool:
        """Whether the compiled core decodes JPEGs here (with the pure-Python twin the CPU share costs the GIL)."""
        return native_jpeg.library() is not None

    @staticmethod
    def finish_jpegs(started: StartedBatch, stream) -> torch.Tensor:
        """The crops of a :meth:`start_batch` batch, back to back in one buffer, ready in order on ``stream``."""
        buf, _, done = started.future.result()
        stream.wait_event(done)
        if buf.is_cuda:
            buf.record_stream(stream)
        return buf

    def start(self, data: Sequence, **kwargs) -> StartedBatch:
        """Begin decoding a batch in the background, on a stream of this decoder's, and return at once; ``finish``
        hands the images over to the caller's stream. A pipeline starts batch k+1 from its CPU stage while its
        device stage still works on batch k, so the JPEG engines wait neither for that host work nor for the
        stage's other operators. Takes ``decode``'s keyword arguments except ``stream`` and ``defer``."""
        checks: list[Callable[[], None]] = []
        stream = self._ahead_stream()

        def work() -> tuple[list[torch.Tensor], object]:
            with _cuda.device(self.device):
                images = self.decode(data, stream=stream, defer=checks.append, **kwargs)
                done = _cuda.Event()
                done.record(stream)
            return images, done
        return StartedBatch(self._ahead.submit(work), checks)

    @staticmethod
    def finish(started: StartedBatch, stream) -> tuple[list[torch.Tensor], list[Callable[[], None]]]:
        """The images of a ``start``-ed batch, ready in order on ``stream``, and its deferred checks (see
        ``decode``'s ``defer``). Raises what the decoding raised."""
        images, done = started.future.result()
        stream.wait_event(done)
        seen: set[int] = set()
        for t in images:  # memory allocated on the decoding stream, now read on ``stream``: one call a buffer
            ptr = t.untyped_storage().data_ptr()
            if ptr not in seen:
                seen.add(ptr)
                t.record_stream(stream)
        return images, started.checks

    def close(self) -> None:
        """Stop the helper threads and release nvImageCodec's decoders (and their threads) now, while the
        interpreter is alive, rather than during its teardown."""
        self._ahead.shutdown(wait=True)
        self._gpu_threads.shutdown(wait=True)
        self._hw = self._cuda = None
        if self._own_runtime:
            self._runtime.close()
