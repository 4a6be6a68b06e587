"""Routing each sample of a batch of encoded images between the GPU's batched JPEG decoder and the CPU, from header
facts read for the whole batch at once (the mixed decoders' batch lane, :meth:`GpuImageDecoder.start_batch`).

The batch lies back to back in one buffer (readers.file's). The compiled core reads every JPEG header and checks
the entropy-coded data in the pipeline's threads (:func:`sluice.native.image.jpeg_info`); the rest is vectorised
over its rows. Each sample then goes one of three ways, and none takes the batch off the lane:

* ``GPU``: complete baseline/extended JPEGs of 1 or 3 components within the pixel limit whose scans passed the
  check: one batched nvJPEG call for all of them (EXIF-rotated ones too: their stored window is decoded and turned
  on the GPU, as the general path does);
* ``CORE``: complete, upright progressive JPEGs of 1 or 3 components: libjpeg-turbo in the compiled core, which
  gives simplejpeg's pixels (tests/native/test_jpeg_native.py), the GIL released;
* ``CODEC``: everything else, one :func:`sluice.backends.image.decode` call each (PNG and the other formats with
  OpenCV/Pillow, CMYK/YCCK with Pillow, truncated JPEGs and JPEGs whose scans the check flags with simplejpeg in
  strict mode, which names the damage, rotated progressive JPEGs, images above the pixel limit, which raise).

These are the decoders the general path (``GpuImageDecoder.decode``) uses for each kind of file, so a sample's
pixels do not depend on the batch it came in. Only the samples the core could not read (other formats, broken
headers) and JPEGs with an Exif block (their orientation) are probed one by one, in Python.

Example::

    plan = plan_batch(region, offsets, sizes, sources, output_type="RGB", adjust_orientation=True)
    plan.windows = np.column_stack([np.zeros((plan.n, 2), np.int64), plan.upright])   # whole images
    plan.counts()      # {'gpu': 231, 'cpu_core': 20, 'cpu_codec': 5}
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from sluice.errors import SampleError
from sluice.native import image as nimg

from .common import get_max_image_pixels
from .cpu import ImageInfo, probe

__all__ = ["GPU", "CORE", "CODEC", "PATHS", "BatchPlan", "plan_batch"]

#: Routes of a sample (the values of :attr:`BatchPlan.route`).
GPU, CORE, CODEC = 0, 1, 2
#: Their names in counts and statistics.
PATHS = ("gpu", "cpu_core", "cpu_codec")


@dataclass
class BatchPlan:
    """One batch's routing: the samples' bytes (``region`` at ``offsets``, ``sizes`` bytes each), their ``route``
    (GPU, CORE or CODEC), stored ``(height, width)``, EXIF ``orientation`` (1 where it is not applied), the
    ``upright`` ``(height, width)``, the probes made (``infos``, None where none was needed) and the output's
    ``output_type`` ('RGB' or 'GRAY'). ``windows`` ``(n, 4)``: ``(y, x, h, w)`` in the upright image, set by the
    caller (the operator draws them)."""

    region: torch.Tensor
    offsets: np.ndarray
    sizes: np.ndarray
    sources: list[str]
    route: np.ndarray
    stored: np.ndarray
    orientation: np.ndarray
    infos: list[ImageInfo | None]
    output_type: str
    adjust_orientation: bool
    windows: np.ndarray | None = field(default=None)

    @property
    def n(self) -> int:
        return len(self.sizes)

    @property
    def channels(self) -> int:
        return 1 if self.output_type == "GRAY" else 3

    @property
    def upright(self) -> np.ndarray:
        """``(n, 2)``: each image's (height, width) once its orientation is applied."""
        turned = np.isin(self.orientation, (5, 6, 7, 8))
        return np.where(turned[:, None], self.stored[:, ::-1], self.stored)

    def counts(self) -> dict[str, int]:
        """How many samples each route takes."""
        found = np.bincount(self.route, minlength=len(PATHS))
        return {name: int(k) for name, k in zip(PATHS, found)}

    def sample_bytes(self, i: int) -> np.ndarray:
        """Sample ``i``'s encoded bytes (a NumPy view of the region)."""
        start = int(self.offsets[i])
        return self.region.numpy()[start: start + int(self.sizes[i])]


def plan_batch(region: torch.Tensor, offsets: np.ndarray, sizes: np.ndarray, sources: list[str], *,
               output_type: str, adjust_orientation: bool, check_scans: bool = True, pool=None,
               core_decodes: bool = True, info: np.ndarray | None = None) -> BatchPlan:
    """Route every sample of a batch lying in ``region`` (see the module docstring). ``check_scans``: send JPEGs
    whose entropy-coded data fails :func:`~sluice.backends.image.formats.jpeg_scan_is_plausible` to the strict CPU
    decoder; ``core_decodes``: whether the compiled core decodes JPEGs here (else progressive ones go to CODEC);
    ``info``: :func:`sluice.native.image.jpeg_info`'s rows when already read. A sample whose header cannot be read
    raises SampleError naming it and its file, as the per-sample probe does."""
    offsets = np.asarray(offsets, dtype=np.int64)
    sizes = np.asarray(sizes, dtype=np.int64)
    if info is None:
        info = nimg.jpeg_info(region.numpy(), offsets, sizes, check_scans, pool)
    n = len(sizes)
    h, w = info[:, nimg.HEIGHT].astype(np.int64), info[:, nimg.WIDTH].astype(np.int64)
    jpeg = info[:, nimg.STATUS] == 0
    complete = (jpeg & np.isin(info[:, nimg.COMPONENTS], (1, 3)) & (h > 0) & (w > 0)
                & (h * w <= get_max_image_pixels()) & (info[:, nimg.ENDS_WITH_EOI] == 1))
    gpu = complete & (info[:, nimg.PROGRESSIVE] == 0)
    if check_scans:
        gpu &= info[:, nimg.SCAN_OK] == 1
    route = np.full(n, CODEC, np.int8)
    if core_decodes:
        route[complete & (info[:, nimg.PROGRESSIVE] == 1)] = CORE
    route[gpu] = GPU
    stored = np.stack([h, w], axis=1)
    orientation = np.ones(n, np.int8)
    infos: list[ImageInfo | None] = [None] * n
    # Probed one by one: what the core could not read (it may be another format, or broken: the probe names the
    # problem), and the orientation of JPEGs that carry an Exif block.
    need = ~jpeg | ((info[:, nimg.HAS_EXIF] == 1) & adjust_orientation)
    view = region.numpy()
    for i in np.flatnonzero(need).tolist():
        start = int(offsets[i])
        try:
            found = probe(view[start: start + int(sizes[i])], source=sources[i])
        except Exception as exc:  # noqa: BLE001 - raised naming the sample, as the per-sample path does
            raise SampleError(i, sources[i], exc) from exc
        infos[i] = found
        stored[i] = found.height, found.width
        turn = found.orientation if adjust_orientation else 1
        orientation[i] = turn
        if turn != 1 and route[i] == CORE:  # the core decodes upright windows only
            route[i] = CODEC
    return BatchPlan(region, offsets, sizes, list(sources), route, stored, orientation, infos, output_type,
                     adjust_orientation)
