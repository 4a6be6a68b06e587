"""Which part of side_by_side.py's `train` program costs what: the program with one piece changed at a time.

    python benchmarks/diag/train_variants.py /tmp/sbs/images [variant ...]
variants: full, no_crop (decoders.image), no_mirror, fp32, no_resize_cmn (decoder only), decode_only_crop;
"@N" after a variant sets num_threads (full@4);  --memory ITERATIONS: GPU memory, RSS and /dev/shm over a run
"""
import sys
import time

import torch

from sluice import fn, pipeline_def, types
from sluice.torch import DALIClassificationIterator

MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


def build(root, variant, threads=16):
    @pipeline_def(batch_size=256, num_threads=threads, device_id=0, seed=12)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="Reader")
        if variant == "no_crop":
            images = fn.decoders.image(jpegs, device="mixed", output_type=types.RGB)
        else:
            images = fn.decoders.image_random_crop(jpegs, device="mixed", output_type=types.RGB,
                                                   random_aspect_ratio=[0.8, 1.25], random_area=[0.6, 1.0],
                                                   num_attempts=100)
        if variant in ("no_resize_cmn", "decode_only_crop"):
            return images, labels
        images = fn.resize(images, resize_x=224, resize_y=224, interp_type=types.INTERP_TRIANGULAR)
        mirror = 0 if variant == "no_mirror" else fn.random.coin_flip(probability=0.5)
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT if variant == "fp32" else types.FLOAT16,
                                          output_layout="CHW", crop=(224, 224), mean=MEAN, std=STD, mirror=mirror)
        return images, labels
    p = pipe()
    p.build()
    return p


def memory(root: str, iterations: int, every: int = 1000) -> None:
    """GPU memory, host RSS and /dev/shm entries over ``iterations`` of the full program (the images issue's
    flat-memory check): one line per ``every`` iterations."""
    import os

    p = build(root, "full")
    loader = DALIClassificationIterator(p, reader_name="Reader", auto_reset=True)
    it = iter(loader)
    page = os.sysconf("SC_PAGE_SIZE")
    for k in range(iterations + 1):
        try:
            next(it)
        except StopIteration:
            it = iter(loader)
            next(it)
        if k % every == 0:
            torch.cuda.synchronize()
            rss = int(open("/proc/self/statm").read().split()[1]) * page
            print(f"MEMORY iteration {k:6d} gpu allocated {torch.cuda.memory_allocated() >> 20:6d} MiB, peak "
                  f"{torch.cuda.max_memory_allocated() >> 20:6d} MiB, host RSS {rss >> 20:6d} MiB, /dev/shm entries "
                  f"{len(os.listdir('/dev/shm'))}", flush=True)


def main():
    root = sys.argv[1]
    if sys.argv[2:3] == ["--memory"]:
        return memory(root, int(sys.argv[3]))
    for variant in sys.argv[2:] or ["full", "no_crop", "no_mirror", "fp32", "no_resize_cmn"]:
        variant, _, threads = variant.partition("@")  # full@4: the full program with 4 threads
        p = build(root, variant, int(threads or 16))
        if variant in ("no_resize_cmn", "decode_only_crop"):
            run = p.run
        else:
            loader = DALIClassificationIterator(p, reader_name="Reader", auto_reset=True)
            state = [iter(loader)]

            def run():
                try:
                    return next(state[0])
                except StopIteration:
                    state[0] = iter(loader)
                    return next(state[0])
        for _ in range(8):
            run()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(40):
            run()
        torch.cuda.synchronize()
        print(f"VARIANT {variant:16s} threads {int(threads or 16):2d} {256 * 40 / (time.perf_counter() - t):9.0f} img/s", flush=True)
        del p


if __name__ == "__main__":
    main()
