"""GPU video backend: NVDEC through PyNvVideoCodec, behind the same interface as the PyAV backend.

For a video file (a path) with timestamps, PyNvVideoCodec's ``SimpleDecoder`` demuxes, seeks and decodes the
wanted frames in C++ with the GIL released; every frame it returns is checked against the packet index by its
timestamp, and a file where they disagree (or that it cannot open) goes the other way from then on. Otherwise
PyAV demuxes (it already knows where every keyframe is from the packet index); the packets of each wanted group
of pictures go, from its keyframe, to an NVDEC decoder session (H.264/HEVC converted to Annex B by FFmpeg's
``*_mp4toannexb`` bitstream filters, codec headers prepended for MPEG-4 and AV1). NVDEC converts NV12 to RGB on the
GPU; frames never leave the GPU. Several sessions run at once (one per calling thread, up to ``sessions``), so the
GPU's NVDEC engines (7 on an H200) work in parallel when the pipeline decodes several samples at a time. Example::

    backend = NvdecBackend(device_id=0)
    frames = backend.decode("clip.mp4", get_index("clip.mp4"), [3, 40])   # {frame: (H, W, 3) uint8 CUDA tensor}
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from typing import Sequence

import numpy as np
import torch

from sluice.runtime import Runtime

from .bitstream import annexb_parameter_sets, nonref_detector
from .index import Source, VideoError, VideoIndex, file_key, packets_from, reusable_container, video_stream

logger = logging.getLogger(__name__)

# FFmpeg codec name -> PyNvVideoCodec cudaVideoCodec member
NVDEC_CODECS = {"h264": "H264", "hevc": "HEVC", "vp9": "VP9", "av1": "AV1", "mpeg4": "MPEG4", "vp8": "VP8",
                "mpeg2video": "MPEG2", "mpeg1video": "MPEG1", "vc1": "VC1"}
ANNEXB_FILTERS = {"h264": "h264_mp4toannexb", "hevc": "hevc_mp4toannexb"}
SESSION_WAIT_S = 120.0
OPEN_AHEAD_WAIT_S = 60.0  # longest a decoder opened ahead waits for the others (open_ahead)
REORDER_SLACK = 64  # frames a decoder may need past the last wanted one before it shows it
SPLIT_FRAMES, SPLIT_GROUPS = 48, 3  # requests of >= 48 frames split into runs of >= 3 groups of pictures


class NvdecUnsupported(VideoError):
    """NVDEC cannot decode this codec or frame size at all (not a problem of one file's data)."""


def nvdec_codec(codec: str, name: str = "") -> str:
    """The PyNvVideoCodec codec name for an FFmpeg codec name, or a clear error listing what NVDEC decodes."""
    try:
        return NVDEC_CODECS[codec]
    except KeyError:
        raise NvdecUnsupported(f"{name + ': ' if name else ''}codec {codec!r} is not supported by the GPU (NVDEC) video "
                         f"decoder; supported codecs are {', '.join(sorted(NVDEC_CODECS))} (use device='cpu' for "
                         f"others)") from None


def _import_nvc():
    try:
        import PyNvVideoCodec as nvc  # noqa: N813
    except Exception as e:  # ImportError, or the library failing to find the driver
        raise RuntimeError("the GPU video decoder needs PyNvVideoCodec (pip install PyNvVideoCodec) and an NVIDIA "
                           f"driver with NVDEC: {e}") from e
    return nvc


def nv12_to_rgb(nv12: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """NV12 frames ``(N, H*3/2, W)`` uint8 -> ``(N, H, W, 3)`` uint8 RGB (BT.601 limited range), on their device."""
    y = nv12[:, :height].float()
    uv = nv12[:, height:height + height // 2].reshape(nv12.shape[0], height // 2, width // 2, 2).float()
    uv = uv.repeat_interleave(2, dim=1).repeat_interleave(2, dim=2)
    c = (y - 16.0) * 1.164383
    d = uv[..., 0] - 128.0
    e = uv[..., 1] - 128.0
    rgb = torch.stack([c + 1.596027 * e, c - 0.391762 * d - 0.812968 * e, c + 2.017232 * d], dim=-1)
    return rgb.round_().clamp_(0, 255).to(torch.uint8)


def check_caps(nvc, codec: str, device_id: int, width: int, height: int) -> None:
    """Raise a clear error when NVDEC cannot decode this codec at this size (8-bit 4:2:0), as the GPU reports."""
    get_caps = getattr(nvc, "GetDecoderCaps", None)
    if get_caps is None:
        return
    try:
        caps = dict(get_caps(gpuid=device_id, codec=getattr(nvc.cudaVideoCodec, codec)))
    except Exception:  # noqa: BLE001 - older PyNvVideoCodec: let the decoder itself report
        return
    if "supported" in caps and not caps["supported"]:
        raise VideoError(f"this GPU's NVDEC does not decode {codec}; use device='cpu'")
    lo_w, lo_h = caps.get("width_min", 0), caps.get("height_min", 0)
    hi_w, hi_h = caps.get("width_max", 1 << 30), caps.get("height_max", 1 << 30)
    if not (lo_w <= width <= hi_w and lo_h <= height <= hi_h):
        raise VideoError(f"{codec} at {width}x{height} is outside what this GPU's NVDEC decodes ({lo_w}x{lo_h} to "
                         f"{hi_w}x{hi_h}); use device='cpu'")


class _Session:
    """One NVDEC decoder (PyNvVideoCodec ``CreateDecoder``) for one codec and frame size."""

    def __init__(self, nvc, codec: str, device_id: int, width: int, height: int) -> None:
        self.nvc = nvc
        check_caps(nvc, codec, device_id, width, height)
        self.rgb_native = True
        kwargs = dict(gpuid=device_id, codec=getattr(nvc.cudaVideoCodec, codec), usedevicememory=True)
        try:
            self.decoder = nvc.CreateDecoder(**kwargs, outputColorType=nvc.OutputColorType.RGB)
        except (TypeError, AttributeError):  # PyNvVideoCodec 1.x: NV12 output only; converted here on the GPU
            self.decoder = nvc.CreateDecoder(**kwargs)
            self.rgb_native = False
        self.width, self.height = width, height
        self._keep = None  # the host buffer of the packet being decoded

    def feed(self, data, pts: int) -> list:
        """Decode one packet: bytes or any buffer (a PyAV packet); ``None`` ends the stream, flushing the frames
        the decoder still holds."""
        packet = self.nvc.PacketData()
        buf = None if data is None else np.frombuffer(data, np.uint8)
        if buf is None or buf.size == 0:
            packet.bsl = 0
            packet.bsl_data = 0
        else:
            self._keep = (data, buf)  # alive until the next packet: the decoder reads the host buffer
            packet.bsl = int(buf.size)
            packet.bsl_data = int(buf.ctypes.data)
        packet.pts = int(pts)
        if hasattr(packet, "decode_flag"):
            packet.decode_flag = 0  # no extra CUVID packet flags (end of stream is signalled by an empty packet)
        frames = self.decoder.Decode(packet)
        return list(frames)

    def to_rgb(self, frame) -> torch.Tensor:
        """A decoded frame as an owned ``(H, W, 3)`` uint8 CUDA tensor (the decoder reuses its surfaces)."""
        if self.rgb_native:
            return owned_rgb(frame, self.height, self.width)
        t = torch.from_dlpack(frame)
        return nv12_to_rgb(t.reshape(1, -1, t.shape[-1]), self.height, self.width)[0, :, : self.width]


def owned_rgb(frame, height: int, width: int) -> torch.Tensor:
    """An RGB frame of PyNvVideoCodec (DLPack, HWC or planar CHW) as an owned ``(H, W, 3)`` uint8 CUDA tensor."""
    t = torch.from_dlpack(frame)
    if t.dim() == 3 and t.shape[0] == 3 and t.shape[-1] != 3:  # planar output: CHW -> HWC
        t = t.permute(1, 2, 0)
    return t[:height, :width].clone(memory_format=torch.contiguous_format)


def frame_pts(frame) -> int:
    """The timestamp PyNvVideoCodec gives a decoded frame (the packet's pts)."""
    ts = getattr(frame, "timestamp", None)
    return int(ts if ts is not None else frame.getPTS())


#: Clocks a decoder's frame timestamps may be on besides the stream's own time base: NVIDIA's demuxer samples give
#: timestamps on a "user" clock, milliseconds by default.
TIMESTAMP_CLOCKS = (1000, 90000, 1_000_000)


def timestamps_agree(stamps: Sequence[int], frames: Sequence[int], idx: VideoIndex) -> bool:
    """Whether decoded frames carrying ``stamps`` are the index's ``frames``: the stamps equal the frames' pts (or
    those shifted by the stream's dts lead), or their presentation times on a clock of :data:`TIMESTAMP_CLOCKS`
    (within a tick) that is fine enough to tell the video's closest frames apart (three ticks or more between
    them)."""
    if not len(frames):
        return True
    wanted = np.asarray(frames)
    got = np.asarray(stamps, np.int64)
    pts = idx.pts[wanted]
    if np.array_equal(got, pts):
        return True
    # the same clock shifted as FFmpeg shifts it when it makes the first dts 0 (no edit list applied: mp4 with
    # B-frames; measured on the H200, frames right by their barcodes, stamps two frames below the pts); the shift
    # comes from the index, it is not fitted to the stamps
    shift = idx.dts_lead
    if shift and np.array_equal(got, pts + shift):
        return True
    closest = idx.closest_interval
    seconds = idx.times[wanted]
    return any(closest * clock >= 3 and np.all(np.abs(got - np.round(seconds * clock)) <= 1)
               for clock in TIMESTAMP_CLOCKS)


#: PyNvVideoCodec 2.2.4's SimpleDecoder stamps the frames of B-pyramid H.264 one to three frames below their pts
#: (measured on the H200: every one of 64 clips of the benchmark video, each frame right by its barcode), so its
#: stamps cannot prove which frames it returned. On a constant-frame-rate file whose stamps lie near the expected
#: ones (:func:`stamps_near`), the first PIXEL_CHECKS such requests are decoded packet by packet as well and must
#: give the same pixels; after that the file is taken on near stamps.
PIXEL_CHECKS = 2


def stamps_near(stamps: Sequence[int], frames: Sequence[int], idx: VideoIndex) -> bool:
    """Whether each of ``stamps`` lies between two frames and the stream's dts lead below its frame's pts and one
    frame above it, on a constant-frame-rate stream. (Not whether they rise: the stamps SimpleDecoder gives the
    right frames do not always.)"""
    if idx.is_vfr or len(stamps) != len(frames) or idx.num_frames < 2:
        return False
    got = np.asarray(stamps, np.int64)
    step = int(idx.median_interval)
    lead = min(0, idx.dts_lead)
    pts = idx.pts[np.asarray(frames)]
    return bool(np.all(got >= pts + lead - 2 * step) and np.all(got <= pts + step))


#: Whether files are decoded through PyNvVideoCodec's SimpleDecoder (False: always packet by packet; tests set it).
SIMPLE_DECODER = True


def simple_decoder_enabled() -> bool:
    """Whether files are decoded through PyNvVideoCodec's SimpleDecoder (:data:`SIMPLE_DECODER`)."""
    return SIMPLE_DECODER


class _FileDecoders:
    """Up to ``limit`` PyNvVideoCodec ``SimpleDecoder``s, each open on one file and switched to another
    (``reconfigure_decoder``, which reuses its NVDEC sessions) when a request for a file no free one holds comes.

    SimpleDecoder demuxes, seeks and decodes in C++ with the GIL released. On the H200 (60 s 720p H.264,
    clips of 16 frames, stride 60) 7 threads fetched 10.4 clips/s through it against 5.7 feeding packets from
    Python, whose per-packet work held the GIL (1 thread: 1.69 against 1.72)."""

    def __init__(self, device_id: int, limit: int) -> None:
        self.device_id, self.limit = device_id, limit
        self._free: list = []
        self._created = 0
        self._cond = threading.Condition()

    def acquire(self, nvc, path: str, key: tuple):
        """A decoder open on ``path``, whose :func:`file_key` is ``key``: a free one already on it (the same file),
        a new one while fewer than ``limit`` exist, else the first free one, switched to ``path``."""
        switch = None
        with self._cond:
            while True:
                same = next((k for k, dec in enumerate(self._free) if dec.sluice_key == key), None)
                if same is not None:
                    return self._free.pop(same)
                if self._created < self.limit:
                    self._created += 1
                    break
                if self._free:
                    switch = self._free.pop(0)
                    break
                if not self._cond.wait(SESSION_WAIT_S):
                    raise VideoError(f"{path}: no NVDEC decoder became free in {SESSION_WAIT_S:.0f} s")
        try:
            if switch is not None:
                switch.reconfigure_decoder(path)
                dec = switch
            else:
                dec = nvc.SimpleDecoder(path, gpu_id=self.device_id, use_device_memory=True,
                                        output_color_type=nvc.OutputColorType.RGB)
        except BaseException:
            self.release(None, broken=True)
            raise
        dec.sluice_key = key
        return dec

    def release(self, dec, broken: bool = False) -> None:
        with self._cond:
            if broken:
                self._created -= 1
            else:
                self._free.append(dec)
            self._cond.notify()

    def drop_free(self) -> None:
        """Drop the decoders no request holds (NvdecBackend.close); new ones are made if asked for again."""
        with self._cond:
            self._created -= len(self._free)
            self._free.clear()
            self._cond.notify_all()


class NvdecBackend:
    """Decodes frames with NVDEC on GPU ``device_id``; up to ``sessions`` decoder sessions per codec and size.

    ``runtime``: the pipeline's :class:`~sluice.runtime.Runtime`, which makes the backend's threads (the pool that
    splits long requests over sessions, the threads that open decoders ahead) and closes the backend with the
    pipeline (a session of it: ``sluice.ops.decoders.video.nvdec_backend``); None: a runtime of its own.
    :meth:`close` drops the decoders.
    """

    device = "cuda"

    def __init__(self, device_id: int = 0, sessions: int = 7, *, runtime: Runtime | None = None) -> None:
        self.device_id = int(device_id)
        self.sessions = max(1, int(sessions))
        self._own_runtime = runtime is None
        self._runtime = Runtime(name="nvdec") if runtime is None else runtime
        self._pools: dict[tuple, queue.Queue] = {}
        self._created: dict[tuple, int] = {}
        self._lock = threading.Lock()
        self._nvc = None
        self._split_pool: ThreadPoolExecutor | None = None
        self._files = _FileDecoders(self.device_id, self.sessions)
        # keyed by file_key (path, device, inode):
        self._files_refused: set[tuple] = set()  # files SimpleDecoder could not open or numbered differently
        self._pixel_checked: dict[tuple, int] = {}  # file -> requests whose near stamps gave the packet path's pixels
        self._pixel_checking: dict[tuple, int] = {}  # file -> such checks in flight
        self._checks = threading.Condition(self._lock)
        self._caps_checked: set[tuple] = set()
        self._opening: list[threading.Thread] = []  # open_ahead's threads
        self.stats = {"file_decoder_runs": 0, "packet_runs": 0, "pixel_checks": 0}

    def open_ahead(self, path: str) -> list[threading.Thread]:
        """Open this backend's file decoders on ``path`` in the background, all at once, each decoding one frame
        (``readers.video`` calls this when its pipeline is built, with the file its first batch reads): a
        SimpleDecoder and its hardware session take about a second to make, and the first batch's NVDEC jobs would
        otherwise each make theirs then. Whatever fails here is left for the first request on the file, which says
        why. Returns the threads opening them (none when there is nothing to open)."""
        try:
            key = file_key(path)
        except OSError:  # the first request says what is wrong with it
            return []
        if not simple_decoder_enabled() or key in self._files_refused:
            return []
        gate = threading.Barrier(self.sessions)  # each holds its decoder until all are made, so that none reuses

        def open_one() -> None:
            dec = None
            try:
                nvc = self._module()
                if hasattr(nvc, "SimpleDecoder"):
                    with torch.cuda.device(self.device_id) if torch.cuda.is_available() else nullcontext():
                        dec = self._files.acquire(nvc, path, key)
                        # NVDEC makes its hardware session at the first sequence header it parses: decoding one
                        # frame now takes that (about a second, measured as the first batch's slowest NVDEC jobs)
                        # out of the first batch
                        dec.get_batch_frames_by_index([0])
            except Exception as e:  # noqa: BLE001
                logger.debug("%s: opening an NVDEC file decoder ahead failed: %s", path, e)
            try:
                gate.wait(timeout=OPEN_AHEAD_WAIT_S)
            except threading.BrokenBarrierError:
                pass
            if dec is not None:
                self._files.release(dec)

        threads = [self._runtime.start_thread("nvdec-open", open_one) for _ in range(self.sessions)]
        self._opening = threads
        return threads

    def ready(self) -> bool:
        """Whether the decoders :meth:`open_ahead` is opening are all open (always, when it was not called): until
        then a request would wait for them (PyNvVideoCodec's import and CUDA's start take seconds in a fresh
        process), so the hybrid backend gives NVDEC no job yet."""
        return not any(t.is_alive() for t in self._opening)

    def close(self) -> None:
        """Wait for the decoders being opened ahead (each gives up after 60 s), stop the split pool, and drop every
        decoder that is not in use (a request still decoding keeps its own until it ends). The backend opens new
        ones if it is used again."""
        deadline = time.monotonic() + OPEN_AHEAD_WAIT_S + 5
        for t in self._opening:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        with self._lock:
            pool, self._split_pool = self._split_pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            for key, free in self._pools.items():
                while True:
                    try:
                        free.get_nowait()
                    except queue.Empty:
                        break
                    self._created[key] -= 1
        self._files.drop_free()
        if self._own_runtime:
            self._runtime.close()
            self._runtime = Runtime(name="nvdec")  # for any later use

    # ---------------------------------------------------------------------------------------------- sessions
    def _module(self):
        """PyNvVideoCodec, imported on first use (a clear error when it or the driver is missing)."""
        with self._lock:
            if self._nvc is None:
                self._nvc = _import_nvc()
            return self._nvc

    def _acquire(self, codec: str, width: int, height: int, name: str) -> tuple[tuple, _Session]:
        key = (codec, width, height)
        nvc = self._module()
        with self._lock:
            pool = self._pools.setdefault(key, queue.Queue())
            create = pool.empty() and self._created.get(key, 0) < self.sessions
            if create:
                self._created[key] = self._created.get(key, 0) + 1
        if create:
            try:
                return key, _Session(nvc, codec, self.device_id, width, height)
            except Exception as e:
                with self._lock:
                    self._created[key] -= 1
                raise NvdecUnsupported(f"{name}: cannot create an NVDEC decoder for {codec} {width}x{height}: {e}") from e
        try:
            return key, pool.get(timeout=SESSION_WAIT_S)
        except queue.Empty:
            raise VideoError(f"{name}: no NVDEC decoder session became free in {SESSION_WAIT_S:.0f} s") from None

    def _release(self, key: tuple, session: _Session, broken: bool) -> None:
        if broken:  # a decoder that raised mid-stream holds unknown state: drop it
            with self._lock:
                self._created[key] -= 1
            return
        self._pools[key].put(session)

    # ------------------------------------------------------------------------------------------------ decode
    def decode(self, source: Source, idx: VideoIndex, frames: Sequence[int]) -> dict[int, torch.Tensor]:
        """Decode the distinct ``frames`` of ``source``; returns {frame: (H, W, 3) uint8 CUDA tensor}.

        A large request (many groups of pictures) is split into runs of consecutive groups decoded at once on
        several sessions, so that one long clip also keeps several NVDEC engines busy.
        """
        plan = idx.plan(frames)
        if not plan:
            return {}
        nvdec_codec(idx.codec, idx.name)
        wanted = {int(f) for f in frames}
        parts = min(self.sessions, len(plan) // SPLIT_GROUPS) if len(wanted) >= SPLIT_FRAMES else 1
        if parts <= 1:
            out = self._decode_plan(source, idx, plan, wanted)
        else:
            with self._lock:
                if self._split_pool is None:
                    self._split_pool = self._runtime.thread_pool("nvdec", self.sessions)
            bounds = np.linspace(0, len(plan), parts + 1).astype(int)
            # each run keeps only its own groups' frames: a run starting at an open-GOP keyframe shows broken
            # leading pictures that belong to the previous run
            futures = [self._split_pool.submit(self._decode_plan, source, idx, plan[a:b],
                                               {f for _, group in plan[a:b] for f in group})
                       for a, b in zip(bounds[:-1], bounds[1:])]
            out = {}
            for f in futures:
                out.update(f.result())
        missing = sorted(wanted - out.keys())
        if missing:
            raise VideoError(f"{idx.name}: frame {missing[0]} could not be decoded by NVDEC (corrupt or truncated "
                             f"data in its group of pictures; the video has {idx.num_frames} frames)")
        return out

    def _decode_plan(self, source: Source, idx: VideoIndex, plan, wanted: set) -> dict[int, torch.Tensor]:
        """Decode ``plan`` (groups of pictures in stream order): through a file decoder when the source is a
        file it handles, else on one decoder session fed packet by packet."""
        out, check = self._decode_file(source, idx, sorted(f for _, group in plan for f in group))
        with self._lock:
            self.stats["packet_runs" if out is None else "pixel_checks" if check else "file_decoder_runs"] += 1
        if out is None:
            return self._decode_packets(source, idx, plan, wanted)
        if check:
            return self._pixel_check(file_key(source), idx, out,
                                     lambda: self._decode_packets(source, idx, plan, wanted))
        return out

    def _take_pixel_check(self, path: tuple) -> bool | None:
        """For a request whose stamps are near the index's: whether it must be checked against the packet path
        (one of the file's first :data:`PIXEL_CHECKS`), False when enough checks passed, None when they failed.
        Requests beyond the checks in flight wait for them rather than all checking at once: the first batch's
        requests of a file all came at once, and each check decodes its frames again from Python, which with
        seven at once took seconds."""
        with self._checks:
            while True:
                if path in self._files_refused:
                    return None
                passed, running = self._pixel_checked.get(path, 0), self._pixel_checking.get(path, 0)
                if passed >= PIXEL_CHECKS:
                    return False
                if passed + running < PIXEL_CHECKS:
                    self._pixel_checking[path] = running + 1
                    return True
                if not self._checks.wait(SESSION_WAIT_S):
                    return True  # the checks in flight are stuck: check this one too

    def _pixel_check(self, path: tuple, idx: VideoIndex, got: dict, exact) -> dict[int, torch.Tensor]:
        """The packet path's frames (``exact()``, decoded now); the file decoder's ``got`` for the same frames must
        equal them to the last pixel (both are NVDEC's RGB), else the file is refused."""
        try:
            exact = exact()
            differ = sorted(f for f in exact if f not in got or not torch.equal(got[f], exact[f]))
            if differ:
                self._refuse(path, f"its frames {differ[:4]} differ in pixels from the packet path's (its "
                                   f"timestamps were near the index's, not equal)")
            with self._checks:
                if not differ:
                    self._pixel_checked[path] = self._pixel_checked.get(path, 0) + 1
            return exact
        finally:
            with self._checks:
                self._pixel_checking[path] -= 1
                self._checks.notify_all()

    def _decode_file(self, source: Source, idx: VideoIndex, frames: list[int]) -> tuple[dict | None, bool]:
        """The ``frames`` of a video file through PyNvVideoCodec's SimpleDecoder, and whether they still need a
        pixel check; None where it does not apply (not a file, no timestamps, turned off) or does not agree with
        the packet index. Each returned frame must carry the pts the index gives that frame number, or (constant
        frame rate) a stamp near it on a file whose first near-stamped requests gave the packet path's pixels
        (see :data:`PIXEL_CHECKS`); else the file is decoded packet by packet from then on."""
        if not isinstance(source, (str, os.PathLike)) or idx.count_frames or not simple_decoder_enabled():
            return None, False
        if not idx.container_tables_exact:  # an edit list hides pictures, or keyframes are no seek points
            return None, False
        path = os.fspath(source)
        try:
            key = file_key(path)  # the caches below are keyed by the file, not by its path alone
        except OSError:  # the packet path says what is wrong with it
            return None, False
        if key in self._files_refused:
            return None, False
        nvc = self._module()
        if not hasattr(nvc, "SimpleDecoder") or not self._caps_ok(nvc, idx):
            return None, False
        try:
            dec = self._files.acquire(nvc, path, key)
        except VideoError:
            raise
        except Exception as e:  # noqa: BLE001 - a file it cannot open (elementary streams, no frame count)
            self._refuse(key, f"it cannot open the file ({e})")
            return None, False
        broken = True
        try:
            device = torch.cuda.device(self.device_id) if torch.cuda.is_available() else nullcontext()
            with device:
                decoded, why, near = self._frames_by_index(dec, idx, frames)
                check = False
                if why and near:
                    check = self._take_pixel_check(key)
                    why = None if check is not None else "its frames' pixels differ from the packet path's"
                out = None if why else {f: owned_rgb(fr, idx.height, idx.width) for f, fr in zip(frames, decoded)}
            broken = False
            if why:
                self._refuse(key, why)
            return out, check
        except Exception as e:  # noqa: BLE001 - decoded again packet by packet, which names what is wrong
            self._refuse(key, f"it failed ({type(e).__name__}: {e})")
            return None, False
        finally:
            self._files.release(dec, broken)

    @staticmethod
    def _frames_by_index(dec, idx: VideoIndex, frames: list[int]) -> tuple[list, str | None, bool]:
        """SimpleDecoder's frames for ``frames``, why their stamps do not prove them the index's frames (None when
        they do), and whether the stamps are near (:func:`stamps_near`)."""
        decoded = dec.get_batch_frames_by_index(frames)
        if len(decoded) != len(frames):
            return decoded, f"it returned {len(decoded)} frames for {len(frames)}", False
        stamps = [frame_pts(frame) for frame in decoded]
        if timestamps_agree(stamps, frames, idx):
            return decoded, None, False
        bad = next((k for k, (s, f) in enumerate(zip(stamps, frames)) if s != idx.pts[f]), 0)
        return decoded, (f"the timestamps of its frames {frames[bad:bad + 4]} are {stamps[bad:bad + 4]}; the index "
                         f"says pts {idx.pts[frames[bad:bad + 4]].tolist()} (time base {idx.time_base}; request "
                         f"{frames[0]}..{frames[-1]})"), stamps_near(stamps, frames, idx)

    def _caps_ok(self, nvc, idx: VideoIndex) -> bool:
        """Whether NVDEC decodes this codec at this size (else the packet path raises the error that says so)."""
        fmt = (idx.codec, idx.width, idx.height)
        if fmt not in self._caps_checked:
            try:
                check_caps(nvc, nvdec_codec(idx.codec, idx.name), self.device_id, idx.width, idx.height)
            except VideoError:
                return False
            self._caps_checked.add(fmt)
        return True

    def _refuse(self, key: tuple, why: str) -> None:
        """Decode the file of :func:`file_key` ``key`` packet by packet from now on."""
        if key not in self._files_refused:
            self._files_refused.add(key)
            logger.info("%s: decoded packet by packet from now on: PyNvVideoCodec's SimpleDecoder is not used for "
                        "it because %s", key[0], why)

    def _decode_packets(self, source: Source, idx: VideoIndex, plan, wanted: set) -> dict[int, torch.Tensor]:
        """Decode ``plan`` on one decoder session, fed packet by packet."""
        out: dict[int, torch.Tensor] = {}
        key, session = self._acquire(nvdec_codec(idx.codec, idx.name), idx.width, idx.height, idx.name)
        broken = True
        try:
            device = torch.cuda.device(self.device_id) if torch.cuda.is_available() else nullcontext()
            with device, reusable_container(source, "nvdec") as container:
                stream = video_stream(container, idx.name)
                self._run_plan(container, stream, idx, plan, session, out, wanted)
            broken = False
        except VideoError:
            raise
        except Exception as e:  # PyNvVideoCodec's errors (corrupt bitstream, decoder failure) name no file
            first = plan[0][1][0] if plan and plan[0][1] else 0
            raise VideoError(f"{idx.name}: NVDEC failed decoding the group of pictures of frame {first} "
                             f"({idx.codec} {idx.width}x{idx.height}): {e}") from e
        finally:
            self._release(key, session, broken)
        return out

    def _packets(self, container, stream, idx: VideoIndex, key: int, wanted: set):
        """Packets from keyframe ``key`` on, as (bytes, pts), ready for NVDEC (Annex B, codec headers first);
        non-reference pictures that are not wanted are left out (nobody needs them decoded)."""
        import av

        bsf_name = ANNEXB_FILTERS.get(idx.codec)
        bsf = av.bitstream.BitStreamFilterContext(bsf_name, stream) if bsf_name else None
        header = b""
        extradata = bytes(stream.codec_context.extradata or b"")
        nonref = None if idx.count_frames else \
            nonref_detector(idx.codec, extradata, annexb=True if bsf is not None else None)
        if bsf is not None:
            header = annexb_parameter_sets(idx.codec, extradata)  # also before open-GOP (non-IDR) keyframes
        elif idx.codec == "mpeg4":
            header = extradata
        elif idx.codec == "av1" and len(extradata) > 4:
            header = extradata[4:]  # av1C: 4 bytes of fields, then the sequence header OBUs
        try:
            for packet in packets_from(container, stream, idx, key):
                if packet.size == 0:
                    break
                pts = packet.pts if packet.pts is not None else packet.dts
                pts = 0 if pts is None else pts
                for p in (bsf.filter(packet) if bsf else (packet,)):
                    if nonref is not None and not header and idx.frame_of_pts(int(pts)) not in wanted and nonref(p):
                        continue
                    if header:
                        yield header + bytes(p), pts
                        header = b""
                    else:
                        yield p, pts  # the packet's own buffer: no copy
        except av.error.FFmpegError as e:
            logger.warning("%s: demuxing stopped: %s", idx.name, e)

    def _run_plan(self, container, stream, idx: VideoIndex, plan, session: _Session, out: dict,
                  wanted: set) -> None:
        pos = -1
        packets = None
        floor = 0  # the keyframe the current run started from: frames shown before it are not trusted
        shown = 0  # frames the decoder gave in this run (AVI: they are numbered by counting)

        def take(decoded: list, pos: int) -> int:
            nonlocal shown
            numbers = range(floor + shown, floor + shown + len(decoded)) if idx.count_frames else None
            shown += len(decoded)
            return self._take(decoded, idx, session, out, pos, wanted, floor, numbers)

        for key, group in plan:
            if packets is None or not (key <= pos + 1 and group[0] > pos):
                if packets is not None:
                    pos = take(session.feed(None, 0), pos)  # flush the last run
                packets = self._packets(container, stream, idx, key, wanted)
                pos, floor, shown = -1, key, 0
            last = group[-1]
            while pos < last:
                item = next(packets, None)
                if item is None or idx.frame_of_pts(int(item[1])) > last + REORDER_SLACK:
                    # end of stream, or far past the group (a wanted frame was lost to corruption): flush the
                    # frames the decoder holds rather than decode on to the end of the video
                    pos = take(session.feed(None, 0), pos)
                    packets = None
                    break
                pos = take(session.feed(*item), pos)
            if packets is None:
                pos = -1
        if packets is not None:
            take(session.feed(None, 0), pos)

    @staticmethod
    def _take(decoded: list, idx: VideoIndex, session: _Session, out: dict, pos: int, wanted: set,
              floor: int, numbers=None) -> int:
        """Keep the wanted frames among ``decoded`` (none shown before the run's keyframe ``floor``: leading
        pictures of an open GOP decoded without their references); return the newest frame number seen.
        Frames are numbered by their timestamps, or by ``numbers`` when given (AVI)."""
        for k, frame in enumerate(decoded):
            if numbers is not None:
                i = numbers[k]
            else:
                i = idx.frame_of_pts(frame_pts(frame))
            if i < 0:
                continue
            pos = max(pos, i)
            if i >= floor and i in wanted and i not in out:
                out[i] = session.to_rgb(frame)
        return pos
