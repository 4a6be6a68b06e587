"""The speech program's kernels alone, outside the pipeline, on one batch of real-shaped utterances: how the CPU
kernels scale with threads (decoders.audio's batch decode, nonsilent_region's core) and what each GPU kernel of
the chain costs on its own (synchronised) and all together (queued back to back), with no CPU load beside it.

    python benchmarks/diag/speech_micro.py ROOT [--batch 64]
"""
import argparse
import glob
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "ops", "audio"))


def timeit(fn, repeat=5):
    fn()
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--batch", type=int, default=64)
    a = ap.parse_args()
    from sluice.native.signal import nonsilent_region
    from sluice.ops.audio.decoder import decode_files
    from sluice.pipeline.batch import Batch
    from sluice.pipeline.pool import RuntimePool, share_items

    files = sorted(glob.glob(os.path.join(a.root, "**", "*.wav"), recursive=True))[: a.batch]
    datas = [np.fromfile(f, np.uint8) for f in files]
    encoded = Batch.from_packed(torch.from_numpy(np.concatenate(datas)), np.array([[len(d)] for d in datas]))
    n = len(files)
    for threads in (1, 4, 8, 16):
        pool = RuntimePool(threads) if threads > 1 else None
        for pin in (False, True):
            ms = timeit(lambda: decode_files(encoded, files, dtype="float32", downmix=True, start_time=[0] * n,
                                             duration=[0] * n, pool=pool, pin=pin, device_id=0))
            print(f"decode   threads {threads:2d} pin {pin!s:5s} {ms:7.2f} ms")
        audio, _ = decode_files(encoded, files, dtype="float32", downmix=True, start_time=[0] * n,
                                duration=[0] * n, pool=pool, pin=True, device_id=0)
        flat, shapes, offsets = audio.packed_form()
        data, lengths = flat.numpy(), shapes[:, 0]
        ms = timeit(lambda: share_items(pool, n, lambda lo, hi, core: nonsilent_region(
            data, offsets[lo:hi], lengths[lo:hi], window=2048, factor=1e-6, pool=core)))
        print(f"nonsilent threads {threads:2d}            {ms:7.2f} ms   ({data.size / 1e6:.1f} M samples)")
        if pool:
            pool.shutdown()
    # the GPU chain on the speech parts, one packed batch on the device
    parts = [nonsilent_region(data, offsets[i:i + 1], lengths[i:i + 1], window=2048, factor=1e-6) for i in range(n)]
    begin = np.array([p[0][0] for p in parts], np.int64)
    length = np.array([p[1][0] for p in parts], np.int64)
    device = torch.device("cuda", 0)
    on_device = flat.to(device)
    torch.cuda.synchronize()
    from test_speech_chain_ragged import CHAIN, run_chain_one  # noqa: E402

    def make():
        return Batch.from_packed(on_device, length[:, None], offsets=offsets + begin)

    def chain(sync):
        b = make()
        times = []
        for op, const, _ in CHAIN:
            t = time.perf_counter()
            b = run_chain_one(b, op, const, device)
            if sync:
                torch.cuda.synchronize()
            times.append((op, (time.perf_counter() - t) * 1e3))
        return b, times

    with torch.cuda.stream(torch.cuda.Stream()):
        for _ in range(3):
            chain(True)
        _, times = chain(True)
        for op, ms in times:
            print(f"gpu {op:22s} {ms:7.2f} ms (synchronised)")
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(20):
            chain(False)
        torch.cuda.synchronize()
        print(f"gpu chain, queued: {(time.perf_counter() - t) / 20 * 1e3:.2f} ms a batch")
        print(f"gpu memory: allocated {torch.cuda.memory_allocated() / 2**20:.0f} MiB, "
              f"reserved {torch.cuda.memory_reserved() / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
