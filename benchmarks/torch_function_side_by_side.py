"""A training input whose augmentation is a PyTorch function (DALI's plugin ``torch_python_function``, as its
docs show it), run with DALI and with sluice: only the import differs (issue 36).

    python benchmarks/torch_function_side_by_side.py IMPL DATA_DIR [--iters N] [--threads T]   IMPL: dali | sluice

The program: readers.file (random_shuffle, pad_last_batch) -> decoders.image (mixed, RGB) -> resize (shorter side
256) -> crop 224 x 224 -> ``nvidia.dali.plugin.pytorch.fn.torch_python_function(batch_processing=True,
device="gpu")`` running torchvision v2's ``Compose([ColorJitter(0.4, 0.4, 0.4), RandomHorizontalFlip()])`` on the
batch (the samples stacked NHWC -> NCHW and back, as a DALI user writes it) -> crop_mirror_normalize (float, CHW,
ImageNet mean and std); batch 128, 8 threads, device 0, read through DALIGenericIterator. DATA_DIR holds class
folders of JPEGs (``python benchmarks/peers/gen.py images DIR 8192``). Prints ``RESULT torch_function IMPL RATE
img/s`` after one warm-up epoch.

DALI runs the function under its default executor settings (DALI's own torch-operator test
``test_current_pipeline`` runs it in a ``Pipeline(13, 4, 0)`` with the defaults); ``--sync`` passes
``exec_async=False, exec_pipelined=False`` (what older DALI releases required for python functions) to both
implementations. The function returns a list of samples, the form every DALI release takes (older ones reject a
single batch tensor). ``--cpu`` builds the same program on the CPU for a smoke test of sluice without a GPU.
"""
import importlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from effnet_side_by_side import (  # noqa: E402
    BASES, IMAGE_SIZE, dali_modules, imagenet_normalize, measure_iterator, row_arguments)

ROW = "torch_function"


def torchvision_augment():
    """The augmentation as a DALI user writes it for ``torch_python_function(batch_processing=True)``: the function
    gets a list of HWC uint8 tensors and returns a list of them."""
    from torchvision.transforms import v2

    return batch_function(v2.Compose([v2.ColorJitter(0.4, 0.4, 0.4), v2.RandomHorizontalFlip()]))


def batch_function(transform):
    """Wrap ``transform`` (on an NCHW batch tensor) as a batch function of HWC samples."""
    import torch

    def augment(samples):
        batch = torch.stack(samples).permute(0, 3, 1, 2)
        out = transform(batch).permute(0, 2, 3, 1).contiguous()
        return list(out)

    return augment


def build(base: str, data_dir: str, batch_size: int = 128, num_threads: int = 8, seed: int = 42,
          device: str = "gpu", augment=None, sync: bool = False):
    """The pipeline, written against ``base`` (``nvidia.dali`` or ``sluice.compat.dali``); ``augment`` is the
    batch function (default: :func:`torchvision_augment`); ``device="cpu"`` builds it without a GPU (a smoke
    test)."""
    pipeline_def, fn, types = dali_modules(base)
    torch_fn = importlib.import_module(base + ".plugin.pytorch.fn")
    augment = augment if augment is not None else torchvision_augment()
    gpu = device == "gpu"
    executor = {"exec_async": False, "exec_pipelined": False} if sync else {}

    @pipeline_def(batch_size=batch_size, num_threads=num_threads, device_id=0 if gpu else None, seed=seed,
                  **executor)
    def training_pipe():
        jpegs, labels = fn.readers.file(name="Reader", file_root=data_dir, random_shuffle=True, pad_last_batch=True)
        images = fn.decoders.image(jpegs, device="mixed" if gpu else "cpu", output_type=types.RGB)
        images = fn.resize(images, resize_shorter=256)
        images = fn.crop(images, crop=(IMAGE_SIZE, IMAGE_SIZE))
        images = torch_fn.torch_python_function(images, function=augment, batch_processing=True, num_outputs=1,
                                                device="gpu" if gpu else "cpu")
        return imagenet_normalize(fn, types, images), labels

    return training_pipe


def main():
    parser = row_arguments(__doc__, threads=8)
    parser.add_argument("--sync", action="store_true", help="exec_async=False, exec_pipelined=False")
    args = parser.parse_args()
    base = BASES[args.impl]
    pipe = build(base, args.data_dir, args.batch_size, args.threads, args.seed,
                 device="cpu" if args.cpu else "gpu", sync=args.sync)()
    pipe.build()
    measure_iterator(ROW, args.impl, base, pipe, args.batch_size, args.iters)


if __name__ == "__main__":
    main()
