"""nnU-Net's 3-D training loader (NVIDIA DeepLearningExamples' ``nnUNet/data_loading/dali_loader.py``,
``TrainPipeline`` with dim=3) as a DALI 2.4 user writes it with ``fn``, run with DALI and with sluice: only the
import differs (issue 39).

    python benchmarks/nnunet_side_by_side.py IMPL ROOT [--batch 2] [--threads 8] [--batches 96] [--cpu]
    python benchmarks/nnunet_side_by_side.py make ROOT [COUNT]       the data set, once (COUNT default 64)

IMPL: dali | sluice. The program, as the example's: two readers.numpy (images ``*_x.npy``, labels ``*_y.npy``; the
same seed and shuffle_after_epoch, so they stay paired; on the CPU) -> reshape to CDHW ->
segmentation.random_object_bbox on the label (start_end, foreground_prob = oversampling 0.4) -> roi_random_crop
to [1, 128, 128, 128] -> slice of image and label at that anchor (out_of_bounds_policy "pad") -> ``.gpu()`` ->
zoom (with p 0.15: crop to 0.7-1.0 of the patch, resize back: cubic for the image, nearest for the label) ->
flips (horizontal, vertical, depthwise coin flips) -> gaussian noise (random.normal, p 0.15) -> gaussian_blur
(p 0.15) -> brightness (p 0.15) -> contrast clamped to the volume's min/max (p 0.15); the "p" choices are the
example's arithmetic on a BOOL coin flip. Batch 2, 8 threads, through DALIGenericIterator (image, label).
Prints ``RESULT nnunet3d IMPL RATE vol/s`` over ``--batches`` batches after ``--warmup`` batches.

The example's spelling is kept: one ``fn.slice([img, label], ...)`` (DALI's multiple input sets) and the patch
size as ``types.Constant``.

``--cpu`` builds the same program with every operator on the CPU (no device, no ``.gpu()``): for a smoke test of
sluice on a machine without a GPU only; the timed program is the GPU one.

``make ROOT [COUNT]`` writes COUNT cases as nnU-Net's preprocessing stores them: ``case_NNNN_x.npy`` float32
(1, D, H, W) z-scored intensities and ``case_NNNN_y.npy`` uint8 (1, D, H, W) labels, D, H, W about 160, 200, 200
(each +-20 %), with 1-3 blob-shaped objects of classes 1-2; seeded per case, spread over all cores.
"""
import glob
import importlib
import itertools
import os
import sys
import time
from multiprocessing import Pool

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import side_by_side_args  # noqa: E402

PATCH = [128, 128, 128]


def build(base: str, imgs: list, lbls: list, batch: int, threads: int, patch=PATCH, oversampling: float = 0.4,
          seed: int = 1, cpu: bool = False):
    """The pipeline function, written against ``base`` (``nvidia.dali`` or ``sluice``)."""
    pipeline_def = importlib.import_module(base).pipeline_def
    fn = importlib.import_module(base + ".fn")
    types = importlib.import_module(base + ".types")
    math = importlib.import_module(base + ".math")
    crop_shape = types.Constant(np.array(patch), dtype=types.INT64)
    crop_shape_float = [float(x) for x in patch]

    def random_augmentation(probability, augmented, original):
        condition = fn.cast(fn.random.coin_flip(probability=probability), dtype=types.DALIDataType.BOOL)
        neg_condition = condition ^ True
        return condition * augmented + neg_condition * original

    def reader(files, name):
        return fn.readers.numpy(files=files, device="cpu", read_ahead=True, dont_use_mmap=True, pad_last_batch=True,
                                shard_id=0, seed=seed, num_shards=1, shuffle_after_epoch=True, name=name)

    @pipeline_def(batch_size=batch, num_threads=threads, device_id=None if cpu else 0, seed=seed)
    def nnunet():
        img = fn.reshape(reader(imgs, "ReaderX"), layout="CDHW")
        lbl = fn.reshape(reader(lbls, "ReaderY"), layout="CDHW")

        # biased crop: a foreground object's box with probability `oversampling`, else anywhere
        roi_start, roi_end = fn.segmentation.random_object_bbox(lbl, device="cpu", background=0, format="start_end",
                                                                cache_objects=True, foreground_prob=oversampling)
        anchor = fn.roi_random_crop(lbl, roi_start=roi_start, roi_end=roi_end, crop_shape=[1, *patch])
        anchor = fn.slice(anchor, 1, 3, axes=[0])  # drop the channel from the anchor
        img, lbl = fn.slice([img, lbl], anchor, crop_shape, axis_names="DHW", out_of_bounds_policy="pad",
                            device="cpu")
        if not cpu:
            img, lbl = img.gpu(), lbl.gpu()

        # zoom
        scale = random_augmentation(0.15, fn.random.uniform(range=(0.7, 1.0)), 1.0)
        d, h, w = [scale * x for x in patch]
        img, lbl = fn.crop(img, crop_h=h, crop_w=w, crop_d=d), fn.crop(lbl, crop_h=h, crop_w=w, crop_d=d)
        img = fn.resize(img, interp_type=types.DALIInterpType.INTERP_CUBIC, size=crop_shape_float)
        lbl = fn.resize(lbl, interp_type=types.DALIInterpType.INTERP_NN, size=crop_shape_float)

        # flips
        flips = {"horizontal": fn.random.coin_flip(probability=0.5), "vertical": fn.random.coin_flip(probability=0.5),
                 "depthwise": fn.random.coin_flip(probability=0.5)}
        img, lbl = fn.flip(img, **flips), fn.flip(lbl, **flips)

        # noise, blur, brightness, contrast
        img_noised = img + fn.random.normal(img, stddev=fn.random.uniform(range=(0.0, 0.33)))
        img = random_augmentation(0.15, img_noised, img)
        img_blurred = fn.gaussian_blur(img, sigma=fn.random.uniform(range=(0.5, 1.5)))
        img = random_augmentation(0.15, img_blurred, img)
        img = img * random_augmentation(0.15, fn.random.uniform(range=(0.7, 1.3)), 1.0)
        scale = random_augmentation(0.15, fn.random.uniform(range=(0.65, 1.5)), 1.0)
        img = math.clamp(img * scale, fn.reductions.min(img), fn.reductions.max(img))
        return img, lbl

    return nnunet


# ---------------------------------------------------------------------------------------------------------------
# make: nnU-Net-preprocessed-like volumes
# ---------------------------------------------------------------------------------------------------------------
def _blob(rng: np.random.Generator, shape: tuple) -> tuple[tuple, np.ndarray]:
    """A lumpy ellipsoid: its bounding slices in ``shape`` and its mask there."""
    radii = rng.uniform(0.04, 0.15, 3) * min(shape)
    centre = [rng.uniform(r, s - r) for r, s in zip(radii, shape)]
    lo = [max(0, int(c - 1.4 * r)) for c, r in zip(centre, radii)]
    hi = [min(s, int(c + 1.4 * r) + 1) for c, r, s in zip(centre, radii, shape)]
    z, y, x = np.ogrid[lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]]
    dz, dy, dx = (z - centre[0]) / radii[0], (y - centre[1]) / radii[1], (x - centre[2]) / radii[2]
    k, phase = rng.uniform(1.5, 4, 3), rng.uniform(0, 2 * np.pi, 3)
    wobble = 0.15 * (np.sin(k[0] * dz + phase[0]) + np.sin(k[1] * dy + phase[1]) + np.sin(k[2] * dx + phase[2]))
    return tuple(slice(a, b) for a, b in zip(lo, hi)), (dz * dz + dy * dy + dx * dx) < (1 + wobble) ** 2


def _make_case(job: tuple) -> int:
    root, index, seed, size = job
    rng = np.random.default_rng([seed, index])
    shape = tuple(int(round(s * rng.uniform(0.8, 1.2))) for s in size)
    lbl = np.zeros(shape, np.uint8)
    for _ in range(int(rng.integers(1, 4))):
        where, mask = _blob(rng, shape)
        lbl[where][mask] = rng.integers(1, 3)
    # z-scored intensities: a smooth field (coarse noise, upsampled by repetition and a box filter), noise, and
    # the objects brighter (1.5 x their class)
    coarse = rng.standard_normal(tuple(s // 16 + 1 for s in shape)).astype(np.float32)
    field = coarse.repeat(16, 0).repeat(16, 1).repeat(16, 2)[: shape[0], : shape[1], : shape[2]]
    img = rng.standard_normal(shape, dtype=np.float32)
    img *= 0.4
    img += 0.5 * field
    img += np.float32(1.5) * lbl
    np.save(os.path.join(root, f"case_{index:04d}_x.npy"), img[None])
    np.save(os.path.join(root, f"case_{index:04d}_y.npy"), lbl[None])
    return int(lbl.astype(bool).sum())


def make(root: str, count: int = 64, size=(160, 200, 200), seed: int = 39, processes: int | None = None) -> None:
    """Write ``root/case_NNNN_x.npy`` and ``root/case_NNNN_y.npy`` for NNNN < count, of about ``size`` (D, H, W)."""
    os.makedirs(root, exist_ok=True)
    with Pool(processes or os.cpu_count()) as pool:
        pool.map(_make_case, [(root, i, seed, tuple(size)) for i in range(count)], chunksize=1)


def main():
    ap = side_by_side_args(__doc__, make, 64, "cases", batch=2, threads=8)
    if ap is None:
        return
    ap.add_argument("--warmup", type=int, default=8, help="batches before the timing")
    ap.add_argument("--batches", type=int, default=96, help="batches timed")
    ap.add_argument("--patch", type=int, nargs=3, default=PATCH)
    a = ap.parse_args()
    import torch

    imgs = sorted(glob.glob(os.path.join(a.root, "*_x.npy")))
    lbls = sorted(glob.glob(os.path.join(a.root, "*_y.npy")))
    base = "nvidia.dali" if a.impl == "dali" else "sluice"
    plugin = importlib.import_module("nvidia.dali.plugin.pytorch" if a.impl == "dali" else "sluice.torch")
    pipe = build(base, imgs, lbls, a.batch, a.threads, patch=a.patch, cpu=a.cpu)()
    loader = plugin.DALIGenericIterator(pipe, output_map=["image", "label"], reader_name="ReaderX", auto_reset=True,
                                        dynamic_shape=False)

    def forever():
        while True:
            yield from loader

    sync = (lambda: None) if a.cpu else torch.cuda.synchronize
    batches = forever()
    for out in itertools.islice(batches, a.warmup):
        pass
    sync()
    t, n, shapes = time.perf_counter(), 0, None
    for out in itertools.islice(batches, a.batches):
        n += out[0]["image"].shape[0]
        shapes = (tuple(out[0]["image"].shape), tuple(out[0]["label"].shape))
    sync()
    rate = n / (time.perf_counter() - t)
    print(f"RESULT nnunet3d {a.impl:7s} {rate:10.2f} vol/s shapes={shapes}", flush=True)


if __name__ == "__main__":
    main()
