"""``fn.random_crop_generator``: a random crop window (random area and aspect ratio, Inception style) for each
input shape, as DALI's operator: the window ``fn.random_resized_crop`` and ``fn.decoders.image_random_crop``
draw (:func:`sluice.native.crop_window.random_crop_window`), given as ``anchor`` and ``shape`` (int32,
``(y, x)`` and ``(h, w)``) to feed ``fn.slice`` or ``fn.decoders.image_slice``.
"""

from __future__ import annotations

import numpy as np
import torch

from sluice.native.crop_window import check_crop_ranges, random_crop_window
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["SCHEMA"]

SCHEMA = OpSchema(
    "random_crop_generator",
    doc="""Produces a crop window of random area and aspect ratio for each input shape (1-D: HW or HWC):
    outputs ``anchor`` (y, x) and ``shape`` (h, w), int32.

    Example::

        anchor, shape = fn.random_crop_generator(fn.peek_image_shape(jpegs))
        images = fn.decoders.image_slice(jpegs, anchor, shape, normalized_anchor=False, normalized_shape=False,
                                         axes=[0, 1])
    """,
    outputs=2,
    devices=("cpu",),
    random=True,
    output_layout="",
    args=[
        Arg("random_area", "float_list", [0.08, 1.0], "Range of the window's area as a fraction of the input's."),
        Arg("random_aspect_ratio", "float_list", [3 / 4, 4 / 3], "Range of the window's width / height."),
        Arg("num_attempts", int, 10, "Draws before falling back to a centred window.", min=1),
    ],
)


@SCHEMA.batch_kernel("cpu")
def random_crop_generator(ctx: BatchContext, shapes: Batch, *, args: BatchArgs) -> tuple[Batch, Batch]:
    n = len(shapes)
    area, ratio, attempts = (args.const(k) for k in ("random_area", "random_aspect_ratio", "num_attempts"))
    check_crop_ranges(area, ratio, attempts, "random_crop_generator")
    anchors = np.zeros((n, 2), np.int32)
    sizes = np.zeros((n, 2), np.int32)
    for i in range(n):
        s = shapes[i].reshape(-1).tolist()
        if len(s) < 2:
            raise ValueError(f"random_crop_generator: sample {i} is a shape of {len(s)} values; give HW or HWC")
        y, x, h, w = random_crop_window(ctx.sample_rng(i, reuse=True), int(s[0]), int(s[1]), area, ratio, attempts)
        anchors[i], sizes[i] = (y, x), (h, w)
    return Batch.from_dense(torch.from_numpy(anchors)), Batch.from_dense(torch.from_numpy(sizes))
