"""``fn.dump_image``: writes every image of the batch to a PPM file for debugging and passes the batch on, as DALI's
operator.

As DALI names them: ``<sample index>-<suffix>-0.ppm`` in the current directory, written again each iteration; plain
(ASCII, "P3") PPM with maxval 255; grey images (one channel) are written with the value in all three channels. The
images must be uint8 with 1 or 3 channels, HWC (or CHW with ``input_layout="CHW"``).
"""

from __future__ import annotations

import numpy as np
import torch

from sluice.errors import SampleError
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["SCHEMA", "ppm_text"]

SCHEMA = OpSchema(
    "dump_image",
    doc="""Saves each image of the batch as ``<sample index>-<suffix>-0.ppm`` (plain PPM) in the current directory
    and returns the batch unchanged. For debugging: files are overwritten every iteration.

    Example::

        images = fn.dump_image(images, suffix="decoded")
    """,
    devices=("cpu", "gpu"),
    args=[
        Arg("suffix", str, "", "Added to the file names: <sample index>-<suffix>-0.ppm."),
        Arg("input_layout", str, "HWC", "Layout of the images: 'HWC' or 'CHW'.", choices=("HWC", "CHW")),
    ],
)


def ppm_text(image: np.ndarray) -> str:
    """A uint8 HWC image (C = 1 or 3) as plain-PPM text: header, then one line per row of ``r g b`` values, each
    followed by a space (grey values repeated three times).

    Example::

        ppm_text(np.zeros((1, 2, 1), np.uint8))    # 'P3\\n2 1\\n255\\n0 0 0 0 0 0 \\n'
    """
    h, w, c = image.shape
    rgb = image if c == 3 else np.repeat(image, 3, axis=2)
    rows = rgb.reshape(h, w * 3).astype(str)
    body = "".join(" ".join(row) + " \n" for row in rows)
    return f"P3\n{w} {h}\n255\n{body}"


def _hwc(image: np.ndarray, layout: str) -> np.ndarray:
    if image.ndim != 3:
        raise ValueError(f"dump_image: images must have 3 dimensions, got shape {image.shape}")
    hwc = image.transpose(1, 2, 0) if layout == "CHW" else image
    if hwc.shape[2] not in (1, 3):
        raise ValueError(f"dump_image: only 3-channel and grey images can be written, got {hwc.shape[2]} channels")
    if hwc.dtype != np.uint8:
        raise TypeError(f"dump_image: images must be uint8, got {hwc.dtype}")
    return hwc


@SCHEMA.batch_kernel("cpu")
@SCHEMA.batch_kernel("gpu")
def dump_image(ctx: BatchContext, images: Batch, *, args: BatchArgs) -> Batch:
    suffix, layout = args.const("suffix"), args.const("input_layout")
    host = images.as_cpu()  # for a GPU batch: one copy to the host, which waits for the GPU work

    def write(i: int) -> None:
        sample: torch.Tensor = host[i]
        try:
            text = ppm_text(_hwc(sample.numpy(), layout))
            with open(f"{i}-{suffix}-0.ppm", "w", encoding="ascii") as f:
                f.write(text)
        except (ValueError, TypeError, OSError) as e:
            raise SampleError(i, ctx.source_info[i] if ctx.source_info else "", e) from e

    if ctx.thread_pool is not None and ctx.device.type == "cpu" and len(host) > 1:
        list(ctx.thread_pool.map(write, range(len(host))))
    else:
        for i in range(len(host)):
            write(i)
    return images
