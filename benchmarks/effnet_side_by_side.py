"""EfficientNet training data as DALI's example writes it (docs/examples/use_cases/pytorch/efficientnet,
image_classification/dali.py), with AutoAugment's ImageNet policy or TrivialAugment Wide, run with DALI and with
sluice: only the import differs (issue 36).

    python benchmarks/effnet_side_by_side.py IMPL DATA_DIR [--policy autoaug|trivial] [--iters N]   IMPL: dali | sluice

The program: readers.file (random_shuffle, pad_last_batch) -> decoders.image_random_crop (mixed, RGB, aspect ratio
3/4..4/3, area 0.08..1) -> resize to 224 x 224 (linear, no antialias) -> flip on a coin -> the policy
(``auto_augment_image_net`` / ``trivial_augment_wide``, shape=[224, 224]) -> crop_mirror_normalize (float, CHW,
ImageNet mean and std); ``enable_conditionals=True``, batch 128, 16 threads, device 0. DATA_DIR holds class folders
of JPEGs (benchmarks/make_imagenet_real.py makes them). Prints ``RESULT effnet_autoaug IMPL RATE img/s`` (or
``effnet_trivial``).
"""
import argparse
import importlib
import time

IMAGE_SIZE = 224

# The implementations a side-by-side row runs: the program is written against DALI's module tree, and sluice's
# mirror of it (sluice.compat.dali) differs only in the prefix, so the import is the one thing that changes.
BASES = {"dali": "nvidia.dali", "sluice": "sluice.compat.dali"}


def dali_modules(base: str):
    """``pipeline_def`` and the ``fn`` and ``types`` modules of ``base`` (``nvidia.dali``, ``sluice`` or
    ``sluice.compat.dali``)."""
    return (importlib.import_module(base).pipeline_def, importlib.import_module(base + ".fn"),
            importlib.import_module(base + ".types"))


def imagenet_normalize(fn, types, images, crop=(IMAGE_SIZE, IMAGE_SIZE)):
    """The classification programs' last step: ``crop_mirror_normalize`` to float CHW with ImageNet's mean and
    std (0-255 scale)."""
    return fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW", crop=crop,
                                    mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
                                    std=[0.229 * 255, 0.224 * 255, 0.225 * 255])


def row_arguments(doc: str, threads: int) -> argparse.ArgumentParser:
    """The command line of a side-by-side row measured through DALIGenericIterator (see :func:`measure_iterator`):
    ``IMPL DATA_DIR [--iters N] [--batch-size B] [--threads T] [--cpu]``."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("impl", choices=tuple(BASES))
    parser.add_argument("data_dir", help="class folders of JPEGs (benchmarks/peers/gen.py images DIR 8192)")
    parser.add_argument("--iters", type=int, default=100, help="timed iterations, after one warm-up epoch")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--threads", type=int, default=threads)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--cpu", action="store_true",
                        help="build the program on the CPU (sluice only, no GPU): a smoke test, not the benchmark")
    return parser


def measure_iterator(row: str, impl: str, base: str, pipe, batch_size: int, iters: int) -> float:
    """Run ``pipe`` (outputs ``images, labels``, reader named "Reader") through ``base``'s DALIGenericIterator:
    one warm-up epoch, then ``iters`` timed batches (crossing epochs); print ``RESULT row impl rate img/s`` and
    return the rate."""
    import torch

    plugin = importlib.import_module(base + ".plugin.pytorch")
    loader = plugin.DALIGenericIterator(pipe, ["images", "labels"], reader_name="Reader", auto_reset=True)
    for _ in loader:  # the warm-up epoch
        pass
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    done = 0
    while done < iters:
        for batch in loader:
            images = batch[0]["images"]
            done += 1
            if done == iters:
                break
    if cuda:
        torch.cuda.synchronize()
    rate = iters * batch_size / (time.perf_counter() - start)
    print(f"RESULT {row} {impl:7s} {rate:10.1f} img/s shape={tuple(images.shape)} dtype={images.dtype}", flush=True)
    return rate


def build(base: str, data_dir: str, policy: str, batch_size: int = 128, num_threads: int = 16, seed: int = 42,
          device: str = "gpu"):
    """The pipeline, written against ``base`` (``nvidia.dali`` or ``sluice``); ``device="cpu"`` runs it without a
    GPU (the CPU decoder, everything on the CPU: a smoke test, not the benchmark)."""
    pipeline_def, fn, types = dali_modules(base)
    auto_augment = importlib.import_module(base + ".auto_aug.auto_augment")
    trivial_augment = importlib.import_module(base + ".auto_aug.trivial_augment")

    gpu = device == "gpu"

    @pipeline_def(enable_conditionals=True, batch_size=batch_size, num_threads=num_threads,
                  device_id=0 if gpu else None, seed=seed)
    def training_pipe():
        jpegs, labels = fn.readers.file(name="Reader", file_root=data_dir, random_shuffle=True, pad_last_batch=True)
        images = fn.decoders.image_random_crop(jpegs, device="mixed" if gpu else "cpu", output_type=types.RGB,
                                               random_aspect_ratio=[0.75, 4.0 / 3.0], random_area=[0.08, 1.0])
        images = fn.resize(images, size=[IMAGE_SIZE, IMAGE_SIZE], interp_type=types.INTERP_LINEAR, antialias=False)
        if gpu:
            images = images.gpu()
        rng = fn.random.coin_flip(probability=0.5)
        images = fn.flip(images, horizontal=rng)
        if policy == "autoaug":
            output = auto_augment.auto_augment_image_net(images, shape=[IMAGE_SIZE, IMAGE_SIZE])
        else:
            output = trivial_augment.trivial_augment_wide(images, shape=[IMAGE_SIZE, IMAGE_SIZE])
        return imagenet_normalize(fn, types, output), labels

    return training_pipe


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("impl", choices=("dali", "sluice"))
    parser.add_argument("data_dir")
    parser.add_argument("--policy", choices=("autoaug", "trivial"), default="autoaug")
    parser.add_argument("--iters", type=int, default=60, help="timed iterations (after 5 warm-up ones)")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--threads", type=int, default=16)
    args = parser.parse_args()
    import torch

    pipe = build("nvidia.dali" if args.impl == "dali" else "sluice", args.data_dir, args.policy, args.batch_size,
                 args.threads)
    p = pipe()
    p.build()
    for _ in range(5):
        p.run()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(args.iters):
        out, _labels = p.run()
    torch.cuda.synchronize()
    rate = args.iters * args.batch_size / (time.perf_counter() - t)
    shape = out.as_tensor().shape
    shape = shape() if callable(shape) else shape  # DALI's TensorGPU.shape is a method
    print(f"RESULT effnet_{args.policy} {args.impl:7s} {rate:10.1f} img/s shape={tuple(shape)}", flush=True)


if __name__ == "__main__":
    main()
