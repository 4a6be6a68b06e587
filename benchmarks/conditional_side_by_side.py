"""DALI's conditional execution on images (its "Conditional execution in DALI" example: per-sample ``if`` on a
random predicate, one augmentation per branch), run with DALI and with sluice: only the import differs (issue 36).

    python benchmarks/conditional_side_by_side.py IMPL DATA_DIR [--iters N] [--threads T]   IMPL: dali | sluice

The program: ``@pipeline_def(enable_conditionals=True)``; readers.file (random_shuffle, pad_last_batch) ->
decoders.image (mixed, RGB) -> per sample: ``if`` a coin flip (p 0.5): rotate by a uniform angle in [-30, 30]
(fill 0, canvas enlarged); ``elif`` a second coin flip: hsv (hue in [-30, 30], saturation in [0.5, 1.5]);
``else``: horizontal flip -> resize to 224 x 224 -> crop_mirror_normalize (float, CHW, ImageNet mean and std);
batch 128, 8 threads, device 0, read through DALIGenericIterator. DATA_DIR holds class folders of JPEGs
(``python benchmarks/peers/gen.py images DIR 8192``). Prints ``RESULT conditional IMPL RATE img/s`` after one
warm-up epoch. ``--cpu`` builds the same program on the CPU for a smoke test of sluice without a GPU.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from effnet_side_by_side import (  # noqa: E402
    BASES, IMAGE_SIZE, dali_modules, imagenet_normalize, measure_iterator, row_arguments)

ROW = "conditional"


def build(base: str, data_dir: str, batch_size: int = 128, num_threads: int = 8, seed: int = 42,
          device: str = "gpu"):
    """The pipeline, written against ``base`` (``nvidia.dali`` or ``sluice.compat.dali``); ``device="cpu"``
    builds it without a GPU (a smoke test)."""
    pipeline_def, fn, types = dali_modules(base)
    gpu = device == "gpu"

    @pipeline_def(enable_conditionals=True, batch_size=batch_size, num_threads=num_threads,
                  device_id=0 if gpu else None, seed=seed)
    def conditional_pipe():
        jpegs, labels = fn.readers.file(name="Reader", file_root=data_dir, random_shuffle=True, pad_last_batch=True)
        images = fn.decoders.image(jpegs, device="mixed" if gpu else "cpu", output_type=types.RGB)
        if fn.random.coin_flip(probability=0.5, dtype=types.DALIDataType.BOOL):
            images = fn.rotate(images, angle=fn.random.uniform(range=[-30, 30]), fill_value=0)
        elif fn.random.coin_flip(probability=0.5, dtype=types.DALIDataType.BOOL):
            images = fn.hsv(images, hue=fn.random.uniform(range=[-30, 30]),
                            saturation=fn.random.uniform(range=[0.5, 1.5]))
        else:
            images = fn.flip(images, horizontal=1)
        images = fn.resize(images, size=[IMAGE_SIZE, IMAGE_SIZE])
        return imagenet_normalize(fn, types, images), labels

    return conditional_pipe


def main():
    args = row_arguments(__doc__, threads=8).parse_args()
    base = BASES[args.impl]
    pipe = build(base, args.data_dir, args.batch_size, args.threads, args.seed,
                 device="cpu" if args.cpu else "gpu")()
    pipe.build()
    measure_iterator(ROW, args.impl, base, pipe, args.batch_size, args.iters)


if __name__ == "__main__":
    main()
