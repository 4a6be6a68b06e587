"""The host operators of the SSD program (ssd_side_by_side.py) timed one by one on a batch of SSD-like boxes:
random_bbox_crop, bb_flip and box_encoder as the CPU kernels the executor runs, and image_slice's windows (the
mixed and CPU decoders' host work) from random_bbox_crop's anchors and shapes.

    python benchmarks/diag/ssd_cpu_ops.py [--batch 64] [--threads 16] [--reps 50]

Prints the mean milliseconds per batch of each.
"""
import argparse
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--reps", type=int, default=50)
    a = ap.parse_args()
    from ssd_side_by_side import dboxes300_ltrb
    from sluice.ops.decoders import windows
    from sluice.pipeline.batch import Batch
    from sluice.pipeline.pool import RuntimePool
    from sluice.schema import BatchArgs, BatchContext, OpSpec, get_schema

    rng = np.random.default_rng(0)
    boxes, labels = [], []
    for i in range(a.batch):
        m = 0 if i % 16 == 5 else int(rng.integers(1, 16))      # a few samples without boxes
        lo = rng.uniform(0, 0.8, (m, 2))
        hi = np.minimum(lo + rng.uniform(0.01, 0.6, (m, 2)), 1)
        boxes.append(torch.from_numpy(np.concatenate([lo, hi], 1).astype(np.float32)))
        labels.append(torch.from_numpy(rng.integers(1, 81, m).astype(np.int32)))
    pool = RuntimePool(a.threads)

    def op(name, **const):
        schema = get_schema(name)
        full = {arg.name: arg.default for arg in schema.args.values()}
        full.update(const)
        spec = OpSpec(schema, "cpu", full, name, a.batch, a.threads, None, 15)
        return schema.kernel_for("cpu")(spec), full

    def timed(label, call):
        call()
        t = time.perf_counter()
        for it in range(a.reps):
            out = call(it)
        print(f"{label:28s} {1e3 * (time.perf_counter() - t) / a.reps:8.3f} ms/batch", flush=True)
        return out

    def ctx(name, it=0):
        return BatchContext(name, a.batch, [""] * a.batch, ["", ""], torch.device("cpu"), pool, 1234, it)

    crop, cargs = op("random_bbox_crop", aspect_ratio=[0.5, 2.0], thresholds=[0, 0.1, 0.3, 0.5, 0.7, 0.9],
                     scaling=[0.3, 1.0], bbox_layout="xyXY", allow_no_crop=True, num_attempts=1)
    res = timed("random_bbox_crop", lambda it=0: crop.run(ctx("random_bbox_crop", it), Batch(boxes), Batch(labels),
                                                          args=BatchArgs(cargs, {}, a.batch)))
    anchor, shape, cboxes, clabels = res
    flip, fargs = op("bb_flip", ltrb=True)
    coins = rng.integers(0, 2, a.batch).tolist()
    timed("bb_flip", lambda it=0: flip.run(ctx("bb_flip"), cboxes, args=BatchArgs(fargs, {"horizontal": coins},
                                                                                      a.batch)))
    enc, eargs = op("box_encoder", criteria=0.5, anchors=dboxes300_ltrb().ravel().tolist())
    timed("box_encoder", lambda it=0: enc.run(ctx("box_encoder"), cboxes, clabels, args=BatchArgs(eargs, {}, a.batch)))
    dec = get_schema("decoders.image_slice")
    dargs = {arg.name: arg.default for arg in dec.args.values()}
    hw = np.stack([rng.integers(360, 481, a.batch), rng.integers(480, 641, a.batch)], 1)
    one = windows.WINDOWS["decoders.image_slice"]
    timed("image_slice windows/sample", lambda it=0: [one(dargs, int(h), int(w), None, (anchor[i].numpy(),
                                                      shape[i].numpy())) for i, (h, w) in enumerate(hw.tolist())])
    if hasattr(windows, "slice_windows"):
        timed("image_slice slice_windows", lambda it=0: windows.slice_windows(BatchArgs(dargs, {}, a.batch), hw,
                                                                                 anchor, shape))
    pool.shutdown()


if __name__ == "__main__":
    main()
