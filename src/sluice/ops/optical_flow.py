"""``fn.optical_flow``: dense optical flow between consecutive frames of sequences, in DALI's output format.

DALI drives NVIDIA's optical flow hardware (the NVOF engine of Turing and later GPUs), which Python cannot reach
here; sluice computes the flow itself, on the GPU (or the CPU) in torch, with a pyramidal iterative Lucas-Kanade
method (:mod:`sluice.kernels.optical_flow`). The output has DALI's format: for a sequence of ``F`` frames of ``H`` x
``W``, ``F - 1`` fields of ``ceil(H / output_grid)`` x ``ceil(W / output_grid)`` float32 vectors ``(x, y)``, in
pixels of the input; field ``i`` holds, for each block of frame ``i + 1``, the displacement to where its content
lies in frame ``i`` (``frame[i + 1](p) ~ frame[i](p + v)``, NVOF's input-to-reference vectors), the mean over the
block's pixels.

How it differs from DALI's hardware engine: the engine matches blocks with a hardware cost search and its own
filtering and gives 1/32-pixel vectors; this method is a differential one, accurate to a fraction of a pixel on
textured images and motions within its pyramid's reach (tens of pixels), weaker on large motions, motion blur and
occlusions, where the engine's search holds better, and its vectors in flat areas come from the coarser levels.
``preset`` trades speed for quality as in DALI (iterations per level: 0.0 -> 8, 0.5 -> 4, 1.0 -> 2).
``enable_temporal_hints`` starts each pair from the previous pair's flow; ``enable_external_hints`` takes a second
input of hint fields (per frame, ``hint_grid`` blocks) as the starting flow.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from sluice import types
from sluice.kernels.optical_flow import block_average, lucas_kanade, pyramid_levels
from sluice.pipeline.batch import Batch
from sluice.schema import Arg, BatchArgs, BatchContext, OpSchema

__all__ = ["SCHEMA", "grey_frames"]

SCHEMA = OpSchema(
    "optical_flow",
    doc="""Computes the optical flow between consecutive frames of sequences (FHWC uint8, RGB, BGR or grey).

    Output: ``F - 1`` fields of ``ceil(H / output_grid)`` x ``ceil(W / output_grid)`` vectors (x, y) in input
    pixels, layout ``FHWC``: field ``i`` maps the blocks of frame ``i + 1`` to frame ``i``. A torch
    implementation (pyramidal Lucas-Kanade), not NVIDIA's optical flow engine; see the module notes. Example::

        flow = fn.optical_flow(frames.gpu(), output_grid=4)
    """,
    inputs=(1, 2),
    devices=("cpu", "gpu"),
    output_layout="FHWC",
    args=[
        Arg("preset", float, 0.0, "Speed and quality: 0.0 slowest and best, 0.5 medium, 1.0 fastest.", min=0,
            max=1),
        Arg("output_grid", int, 4, "Side of the pixel block of one output vector: 1, 2 or 4.", choices=(1, 2, 4)),
        Arg("hint_grid", int, 4, "Side of the pixel block of one external hint vector: 1, 2, 4 or 8.",
            choices=(1, 2, 4, 8)),
        Arg("enable_temporal_hints", bool, False, "Start each frame pair from the previous pair's flow."),
        Arg("enable_external_hints", bool, False, "Take a second input of hint fields (one per frame, "
            "hint_grid blocks, 2 channels) as the starting flow."),
        Arg("image_type", types.DALIImageType, types.RGB, "Colour space of the frames: RGB, BGR or GRAY.",
            choices=(types.RGB, types.BGR, types.GRAY)),
        Arg("output_format", int, -1, "Deprecated DALI spelling of output_grid; -1: use output_grid."),
    ],
)

_LUMA = {types.RGB: (0.299, 0.587, 0.114), types.BGR: (0.114, 0.587, 0.299)}


def grey_frames(frames: torch.Tensor, image_type) -> torch.Tensor:
    """``(..., H, W, C)`` uint8 frames as float grey ``(..., H, W)``."""
    x = frames.to(torch.float32)
    if image_type == types.GRAY or x.shape[-1] == 1:
        return x[..., 0]
    w = torch.tensor(_LUMA[image_type], dtype=torch.float32, device=x.device)
    return (x[..., :3] * w).sum(-1)


def _iterations(preset: float) -> int:
    return 8 if preset < 0.25 else 4 if preset < 0.75 else 2


@SCHEMA.batch_kernel("cpu")
@SCHEMA.batch_kernel("gpu")
def optical_flow(ctx: BatchContext, frames: Batch, hints: Batch | None = None, *, args: BatchArgs) -> Batch:
    """All frame pairs of the batch as one padded tensor; with temporal hints, pair ``k`` of every sequence at
    once, for ``k`` = 1 .. the longest sequence."""
    n = len(frames)
    if not n:
        return Batch([], "FHWC")
    shapes = frames.shapes_array()
    if shapes.shape[1] != 4:
        raise ValueError("optical_flow: the input must be sequences of frames (FHWC)")
    counts = shapes[:, 0]
    if (counts < 2).any():
        i = int(np.argmax(counts < 2))
        raise ValueError(f"optical_flow: sample {i} has {int(counts[i])} frame(s); every sequence needs at least 2")
    if frames.dtype != torch.uint8:
        raise ValueError(f"optical_flow: takes uint8 frames, got {frames.dtype}")
    grid = args.const("output_format") if args.const("output_format") not in (None, -1) else args.const("output_grid")
    if grid not in (1, 2, 4):
        raise ValueError(f"optical_flow: output grid size {grid} is not supported; supported are 1, 2, 4")
    external = bool(args.const("enable_external_hints"))
    if external != (hints is not None):
        raise ValueError("optical_flow: enable_external_hints needs the hints as the second input (and a second "
                         "input needs enable_external_hints=True)")
    padded, _ = frames.padded(fill=None)
    grey = grey_frames(padded, args.const("image_type"))  # (n, Fmax, Hmax, Wmax)
    hw = shapes[:, 1:3]
    iterations = _iterations(float(args.const("preset")))
    levels = pyramid_levels(int(hw[:, 0].min()), int(hw[:, 1].min()))
    hint_full = None
    if external:
        hpad, _ = hints.padded(fill=0.0)  # (n, F, Hh, Wh, 2)
        g = int(args.const("hint_grid"))
        hint_full = hpad.to(grey.device, torch.float32).permute(0, 1, 4, 2, 3)
        hint_full = hint_full.repeat_interleave(g, 3).repeat_interleave(g, 4)[..., :grey.shape[2], :grey.shape[3]]
        hint_full = F.pad(hint_full, (0, grey.shape[3] - hint_full.shape[4], 0, grey.shape[2] - hint_full.shape[3]))
    # pair (sample i, frame k >= 1): target frame k, reference frame k - 1
    si = np.concatenate([np.full(int(c) - 1, i) for i, c in enumerate(counts)]).astype(np.int64)
    fk = np.concatenate([np.arange(1, int(c)) for c in counts]).astype(np.int64)
    dev = grey.device
    flows = torch.empty(len(si), 2, grey.shape[2], grey.shape[3], device=dev)
    temporal = bool(args.const("enable_temporal_hints"))
    waves = [np.arange(len(si))] if not temporal else [np.flatnonzero(fk == k) for k in range(1, int(counts.max()))]
    for wave in waves:  # with temporal hints, frame pair k of every sequence at once
        ws, wk = torch.from_numpy(si[wave]).to(dev), torch.from_numpy(fk[wave]).to(dev)
        init = hint_full[ws, wk] if hint_full is not None else None
        if temporal and init is None and fk[wave[0]] > 1:
            init = flows[torch.from_numpy(wave - 1).to(dev)]  # the same sequence's previous pair
        flows[torch.from_numpy(wave).to(dev)] = lucas_kanade(grey[ws, wk], grey[ws, wk - 1], hw[si[wave]],
                                                             levels=levels, iterations=iterations, init=init)
    blocks, out_hw = block_average(flows, hw[si], grid)
    out = torch.zeros((n, int(counts.max()) - 1) + tuple(blocks.shape[2:]) + (2,), device=dev)
    out[torch.from_numpy(si).to(dev), torch.from_numpy(fk - 1).to(dev)] = blocks.permute(0, 2, 3, 1)
    sample_hw = (hw + grid - 1) // grid
    out_shapes = np.concatenate([counts[:, None] - 1, sample_hw, np.full((n, 1), 2)], axis=1)
    return Batch.from_padded(out, out_shapes, "FHWC")
