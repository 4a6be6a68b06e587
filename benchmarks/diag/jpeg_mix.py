"""How the mixed image decoder splits batches of real-shaped JPEGs between its paths, and what the host work costs.

    python benchmarks/diag/jpeg_mix.py DIR [--batch 256] [--threads 16] [--batches 4]

DIR: a folder of class folders of images (``benchmarks/make_imagenet_real.py DIR`` makes ImageNet's spread:
progressive, grey, CMYK and PNG files among baseline JPEGs). Each batch is read back to back into one buffer as
readers.file reads it, then ``decoders.image_random_crop(device="mixed")`` with the arguments of DALI's ResNet-50
training program (side_by_side.py ``train``) plans it:

* ``kinds``: what the batch holds, from the headers;
* ``route``: how the batch lane splits it (``gpu``: one batched nvJPEG call; ``cpu_core``: libjpeg-turbo in the
  compiled core; ``cpu_codec``: a codec call each) and whether the old lane (every file a plain JPEG) took it;
* ``plan ms``: the lane's host work in the CPU stage (headers and scans in the core, routing, the probes of the
  files the core cannot read, the windows), against the general path's (a Python probe and window per sample, then
  ``GpuImageDecoder.decode``'s routing);
* ``decode ms``: one batch decoded on its own (prepare + run, then a device synchronise) by the lane and by the
  general path, in turns (whichever decodes a batch first pays for its cold caches). Without CUDA the GPU calls
  and kernels are stubs that do nothing (so the time is the host's: the CPU's files and the Python around them),
  and the general path's GPU assembly is left out.

At the end: the decoder's counters (``path_stats``). Run it on the GPU machine beside
``python benchmarks/peers/side_by_side.py train sluice DIR``.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import time
from collections import Counter
from types import SimpleNamespace

import numpy as np
import torch

ARGS = dict(random_aspect_ratio=[0.8, 1.25], random_area=[0.6, 1.0], num_attempts=100)


def _stub_cuda() -> SimpleNamespace:
    """torch.cuda's calls of the GPU decoder, as no-ops (no GPU here)."""
    stream = SimpleNamespace(cuda_stream=0, wait_event=lambda event: None)
    idle = contextlib.nullcontext
    return SimpleNamespace(Event=lambda: SimpleNamespace(record=lambda s=None: None), Stream=lambda d=None: stream,
                           current_stream=lambda d=None: stream, stream=lambda s: idle(), device=lambda d: idle())


def _stub_gpu() -> None:
    """Without CUDA: the GPU calls return blank images of the right sizes (the headers give them)."""
    from sluice.backends.image import gpu
    from sluice.kernels import crops

    gpu._cuda = _stub_cuda()
    gpu.nvimgcodec_module = lambda: None

    def blank_chw(self, parts, gray):  # the kernel that reads them is a no-op too
        return [torch.empty((1 if gray else 3, 1, 1), dtype=torch.uint8) for _ in parts]

    gpu.GpuImageDecoder._decode_gpu_chw = blank_chw
    gpu.GpuImageDecoder._decode_torchvision = lambda self, bufs, rois, gray, stream: [
        torch.zeros((1 if gray else 3, 1, 1), dtype=torch.uint8).permute(1, 2, 0) for _ in bufs]
    gpu.GpuImageDecoder.takes_whole_jpeg_batches = property(
        lambda self: (self._nv is None or self.engines_via_torchvision) and not self._tuners)
    gpu.one_allocation = lambda images: images
    crops.gather_hwc_crops = lambda images, windows, out=None, offsets=None: (out, [])  # the GPU's kernel
    # the general path's scan check runs on the GPU: passed here (the lane's runs in the core, on the CPU)
    gpu.BatchScanCheck.__call__ = lambda self, bufs, region=None: [True] * len(bufs)


def _kinds(plan, info) -> Counter:
    from sluice.native import image as nimg

    kinds = Counter()
    for i in range(plan.n):
        row = info[i]
        probed = plan.infos[i]
        if row[nimg.STATUS] != 0:
            kinds[probed.format if probed is not None else "unreadable"] += 1
        elif row[nimg.COMPONENTS] == 4:
            kinds["cmyk"] += 1
        elif row[nimg.ENDS_WITH_EOI] == 0:
            kinds["truncated"] += 1
        elif row[nimg.PROGRESSIVE]:
            kinds["progressive"] += 1
        elif row[nimg.SCAN_OK] == 0:
            kinds["suspect scan"] += 1
        else:
            kinds["grey" if row[nimg.COMPONENTS] == 1 else "baseline"] += 1
        if plan.orientation[i] != 1:
            kinds["rotated (Exif)"] += 1
    return kinds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--seed", type=int, default=12)
    a = ap.parse_args()

    from sluice import types
    from sluice.backends.image.batch_plan import plan_batch
    from sluice.backends.image.gpu import GpuImageDecoder
    from sluice.native import image as nimg
    from sluice.ops.readers.file import _read_into_one_buffer, batch_region
    from sluice.pipeline.pool import RuntimePool
    from sluice.schema import BatchArgs, BatchContext, OpSpec, get_schema

    cuda = torch.cuda.is_available()
    if not cuda:
        _stub_gpu()
    files = sorted(glob.glob(os.path.join(a.folder, "*", "*")))
    np.random.default_rng(a.seed).shuffle(files)
    name = "decoders.image_random_crop"
    schema = get_schema(name)
    const, _ = schema.validate(dict(output_type=types.RGB, **ARGS), lambda v: False)
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    pool = RuntimePool(a.threads)
    ops = {}
    for lane in (True, False):
        spec = OpSpec(schema, "mixed", const, name, a.batch, a.threads, 0, a.seed)
        ops[lane] = schema.kernel_for("mixed")(spec)
    print(f"{len(files)} files; batch {a.batch}, {a.threads} threads, {'CUDA' if cuda else 'no GPU: GPU calls stubbed'}")
    totals = {True: [], False: []}
    for it in range(a.batches):
        paths = files[it * a.batch:(it + 1) * a.batch]
        if len(paths) < a.batch:
            break
        data = _read_into_one_buffer(paths, pool, cuda, 0 if cuda else None)
        args = BatchArgs(const, {}, a.batch)

        def ctx():
            return BatchContext(name, a.batch, list(paths), [""], device, pool, seed=a.seed, iteration=it)

        dec = ops[True]._get_decoder(ctx())
        if it == 0:
            print(f"decoder: {dec.backend_name}; batch lane {'on' if dec.takes_whole_jpeg_batches else 'OFF'}")
        # the lane's plan (what _start_whole does before start_batch)
        t0 = time.perf_counter()
        region, offsets, sizes = batch_region(data)
        info = nimg.jpeg_info(region.numpy(), offsets, sizes, dec.validate_scans, pool)
        plan = plan_batch(region, offsets, sizes, paths, output_type="RGB", adjust_orientation=True,
                          check_scans=dec.validate_scans, pool=pool, core_decodes=dec.core_decodes_jpeg(), info=info)
        hw = plan.upright
        nimg.random_crop_windows(a.seed, it, hw[:, 0], hw[:, 1], ARGS["random_area"], ARGS["random_aspect_ratio"],
                                 ARGS["num_attempts"])
        t_plan = time.perf_counter() - t0
        # the general path's host work: a probe and a window per sample, then decode()'s routing
        gop = ops[False]
        t0 = time.perf_counter()
        host = gop._host_work(ctx(), data, args=args)
        from sluice.backends.image.gpu import gpu_eligible
        from sluice.backends.image.formats import as_bytes

        eligible = [i for i in range(a.batch) if gpu_eligible(host[1][i], "RGB", as_bytes(host[0][i]))]
        t_general = time.perf_counter() - t0
        kinds = _kinds(plan, info)
        counts = plan.counts()
        old_lane = counts["gpu"] == a.batch
        print(f"batch {it}: kinds {dict(sorted(kinds.items()))}")
        print(f"  route {counts}; the old lane (all plain JPEGs) {'took' if old_lane else 'refused'} it; the "
              f"general path would send {len(eligible)} to the GPU")
        print(f"  plan ms: lane {1e3 * t_plan:.1f} (headers+scans in the core, routing, {sum(i is not None for i in plan.infos)} "
              f"probes, windows) | general {1e3 * t_general:.1f} ({a.batch} probes and windows, routing)")
        for lane in ((False, True) if it % 2 else (True, False)):
            op = ops[lane]
            restore = None
            if not lane:
                restore = GpuImageDecoder.takes_whole_jpeg_batches
                GpuImageDecoder.takes_whole_jpeg_batches = property(lambda self: False)
            try:
                c = ctx()
                t0 = time.perf_counter()
                c.prepared = op.prepare(c, data, args=args) if cuda else None
                out = op.run(c, data, args=args)
                if cuda:
                    torch.cuda.synchronize()
                dt = time.perf_counter() - t0
            finally:
                if restore is not None:
                    GpuImageDecoder.takes_whole_jpeg_batches = restore
            totals[lane].append(dt)
            held = "one packed buffer" if out.packed is not None else "a list of tensors"
            print(f"  decode ms: {'lane   ' if lane else 'general'} {1e3 * dt:7.1f}  -> {held}")
    for lane in (True, False):
        if totals[lane]:
            rest = totals[lane][1:] or totals[lane]
            print(f"{'lane' if lane else 'general'}: {a.batch * len(rest) / sum(rest):.0f} img/s one batch at a "
                  f"time (first batch left out); path_stats {ops[lane].path_stats()}")
    for op in ops.values():
        op.close()
    pool.shutdown()


if __name__ == "__main__":
    main()
