"""NVIDIA's SSD300 COCO training pipeline (DALI's single_stage_detector example, DeepLearningExamples'
``SSD/ssd/coco_pipeline.py``) as a DALI 2.4 user writes it with ``fn``, run with DALI and with sluice: only the
import differs (issue 39).

    python benchmarks/ssd_side_by_side.py IMPL ROOT [--batch 64] [--threads 16] [--epochs 5] [--fp32] [--cpu]
    python benchmarks/ssd_side_by_side.py make ROOT [COUNT]          the data set, once (COUNT default 2048)

IMPL: dali | sluice. The program: readers.coco(ratio, ltrb, skip_empty, random_shuffle) -> random_bbox_crop
(SSD's IoU thresholds [0, .1, .3, .5, .7, .9], scaling [0.3, 1], aspect ratio [0.5, 2], one attempt, xyXY) ->
decoders.image_slice on the GPU ("mixed") -> flip + bb_flip by one coin flip -> resize to 300 x 300 (triangular
min filter) -> hsv (FLOAT) + brightness_contrast (UINT8, centre 128) with uniform random hue, saturation,
brightness, contrast -> crop_mirror_normalize (300 x 300, ImageNet mean/std * 255, FP16, CHW) ; box_encoder
(criteria 0.5, the 8732 SSD300 default boxes in ltrb) on the CPU, then ``.gpu()``; batch 64, 16 threads, seed 15,
through DALIGenericIterator (images, boxes, labels; LastBatchPolicy.FILL as the example). Prints
``RESULT ssd IMPL RATE img/s`` over ``--epochs`` epochs after one warm-up epoch.

``--cpu`` builds the same program with every operator on the CPU (no device, CPU decoder): for a smoke test of
sluice on a machine without a GPU only; the timed program is the GPU one.

``make ROOT [COUNT]`` writes COUNT JPEGs of COCO's sizes (480-640 x 360-480, quality 75-95) under ROOT/train2017
and ROOT/annotations/instances_train2017.json, each image with 1-15 boxes (tiny to nearly whole-image) of
categories with COCO's non-contiguous ids; seeded per image, spread over all cores.
"""
import importlib
import itertools
import json
import math
import os
import sys
import time
from multiprocessing import Pool

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import side_by_side_args  # noqa: E402

# COCO's 80 category ids (1..90 with gaps), which readers.coco maps to 1..80.
COCO_IDS = [i for i in range(1, 91) if i not in (12, 26, 29, 30, 45, 66, 68, 69, 71, 83)]


def dboxes300_ltrb() -> np.ndarray:
    """The 8732 SSD300 default boxes as (8732, 4) ltrb in [0, 1], in the SSD example's order (per feature map:
    sizes (s_k, s_k), (s'_k, s'_k), then (w, h) and (h, w) per aspect ratio; per size, cells in row order)."""
    fig, feats = 300, [38, 19, 10, 5, 3, 1]
    steps, scales = [8, 16, 32, 64, 100, 300], [21, 45, 99, 153, 207, 261, 315]
    ratios = [[2], [2, 3], [2, 3], [2, 3], [2], [2]]
    rows = []
    for k, f in enumerate(feats):
        s1, s2 = scales[k] / fig, scales[k + 1] / fig
        sizes = [(s1, s1), (math.sqrt(s1 * s2),) * 2]
        for r in ratios[k]:
            w, h = s1 * math.sqrt(r), s1 / math.sqrt(r)
            sizes += [(w, h), (h, w)]
        cells = (np.arange(f) + 0.5) * steps[k] / fig           # cell centres; fig / step cells span [0, 1]
        cy, cx = np.meshgrid(cells, cells, indexing="ij")
        for w, h in sizes:
            rows.append(np.stack([cx.ravel(), cy.ravel(), np.full(f * f, w), np.full(f * f, h)], 1))
    cxcywh = np.clip(np.concatenate(rows), 0, 1)
    half = cxcywh[:, 2:] / 2
    return np.concatenate([cxcywh[:, :2] - half, cxcywh[:, :2] + half], 1).astype(np.float32)


def build(base: str, root: str, batch: int, threads: int, fp16: bool = True, cpu: bool = False):
    """The pipeline function, written against ``base`` (``nvidia.dali`` or ``sluice``)."""
    pipeline_def = importlib.import_module(base).pipeline_def
    fn = importlib.import_module(base + ".fn")
    types = importlib.import_module(base + ".types")
    anchors = dboxes300_ltrb().ravel().tolist()
    decoder = "cpu" if cpu else "mixed"

    @pipeline_def(batch_size=batch, num_threads=threads, device_id=None if cpu else 0, seed=15)
    def ssd():
        saturation = fn.random.uniform(range=[0.5, 1.5])
        contrast = fn.random.uniform(range=[0.5, 1.5])
        brightness = fn.random.uniform(range=[0.875, 1.125])
        hue = fn.random.uniform(range=[-0.5, 0.5])
        coin = fn.random.coin_flip(probability=0.5)

        jpegs, bboxes, labels = fn.readers.coco(
            file_root=os.path.join(root, "train2017"),
            annotations_file=os.path.join(root, "annotations", "instances_train2017.json"),
            skip_empty=True, shard_id=0, num_shards=1, ratio=True, ltrb=True, random_shuffle=True, name="Reader")
        crop_begin, crop_size, bboxes, labels = fn.random_bbox_crop(
            bboxes, labels, aspect_ratio=[0.5, 2.0], thresholds=[0, 0.1, 0.3, 0.5, 0.7, 0.9], scaling=[0.3, 1.0],
            bbox_layout="xyXY", allow_no_crop=True, num_attempts=1)
        images = fn.decoders.image_slice(jpegs, crop_begin, crop_size, device=decoder, output_type=types.RGB)
        images = fn.flip(images, horizontal=coin)
        bboxes = fn.bb_flip(bboxes, ltrb=True, horizontal=coin)
        images = fn.resize(images, resize_x=300, resize_y=300, min_filter=types.INTERP_TRIANGULAR)
        images = fn.hsv(images, hue=hue, saturation=saturation, dtype=types.FLOAT)
        images = fn.brightness_contrast(images, brightness=brightness, contrast=contrast, contrast_center=128,
                                        dtype=types.UINT8)
        images = fn.crop_mirror_normalize(images, crop=(300, 300), mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
                                          std=[0.229 * 255, 0.224 * 255, 0.225 * 255], mirror=0,
                                          dtype=types.FLOAT16 if fp16 else types.FLOAT, output_layout="CHW",
                                          pad_output=False)
        bboxes, labels = fn.box_encoder(bboxes, labels, criteria=0.5, anchors=anchors)
        if cpu:
            return images, bboxes, labels
        return images, bboxes.gpu(), labels.gpu()

    return ssd


# ---------------------------------------------------------------------------------------------------------------
# make: a COCO-like detection set
# ---------------------------------------------------------------------------------------------------------------
def _boxes(rng: np.random.Generator, w: int, h: int) -> list[list[float]]:
    """1-15 boxes [x, y, w, h] in pixels: about a third small (< 32 px), a third medium, a third large."""
    out = []
    for _ in range(int(rng.integers(1, 16))):
        kind = rng.integers(3)
        side = {0: rng.uniform(6, 32), 1: rng.uniform(32, 96), 2: rng.uniform(96, min(w, h))}[int(kind)]
        aspect = math.exp(rng.uniform(-0.9, 0.9))
        bw, bh = min(w - 1.0, side * math.sqrt(aspect)), min(h - 1.0, side / math.sqrt(aspect))
        x, y = rng.uniform(0, w - bw), rng.uniform(0, h - bh)
        out.append([round(x, 2), round(y, 2), round(bw, 2), round(bh, 2)])
    return out


def _make_image(job: tuple[str, int, int]) -> dict:
    """One JPEG with its boxes drawn in; returns its image entry and annotations (without ids)."""
    from PIL import Image, ImageDraw
    folder, index, seed = job
    rng = np.random.default_rng([seed, index])
    w, h = int(rng.integers(480, 641)), int(rng.integers(360, 481))
    # a photograph-like background: smooth colour fields (upsampled coarse noise) with fine grain
    coarse = rng.integers(0, 256, (int(rng.integers(3, 9)), int(rng.integers(3, 9)), 3), dtype=np.uint8)
    img = Image.fromarray(coarse).resize((w, h), Image.BICUBIC)
    draw = ImageDraw.Draw(img)
    boxes = _boxes(rng, w, h)
    cats = rng.choice(COCO_IDS, len(boxes)).tolist()
    for (x, y, bw, bh), _ in zip(boxes, cats):
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        shape = draw.ellipse if rng.integers(2) else draw.rectangle
        shape([x, y, x + bw, y + bh], fill=colour, outline=tuple(255 - c for c in colour))
    arr = np.asarray(img, np.int16) + rng.normal(0, 6, (h, w, 1)).astype(np.int16)
    name = f"{index:012d}.jpg"
    Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)).save(os.path.join(folder, name),
                                                                 quality=int(rng.integers(75, 96)))
    return {"image": {"file_name": name, "width": w, "height": h},
            "annotations": [{"bbox": b, "category_id": int(c), "area": round(b[2] * b[3], 2), "iscrowd": 0}
                            for b, c in zip(boxes, cats)]}


def make(root: str, count: int = 2048, seed: int = 39, processes: int | None = None) -> None:
    """Write ``root/train2017/*.jpg`` and ``root/annotations/instances_train2017.json``."""
    folder = os.path.join(root, "train2017")
    os.makedirs(folder, exist_ok=True)
    os.makedirs(os.path.join(root, "annotations"), exist_ok=True)
    jobs = [(folder, i, seed) for i in range(count)]
    with Pool(processes or os.cpu_count()) as pool:
        made = pool.map(_make_image, jobs, chunksize=max(1, count // (4 * (processes or os.cpu_count() or 1))))
    images, annotations, ann_id = [], [], itertools.count(1)
    for image_id, m in enumerate(made, 1):
        images.append({"id": image_id, **m["image"]})
        annotations += [{"id": next(ann_id), "image_id": image_id, **a} for a in m["annotations"]]
    categories = [{"id": c, "name": f"category_{c}", "supercategory": "thing"} for c in COCO_IDS]
    with open(os.path.join(root, "annotations", "instances_train2017.json"), "w") as f:
        json.dump({"images": images, "annotations": annotations, "categories": categories}, f)


def main():
    ap = side_by_side_args(__doc__, make, 2048, "images", batch=64, threads=16)
    if ap is None:
        return
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--fp32", action="store_true", help="FLOAT images (the example's default without AMP)")
    a = ap.parse_args()
    import torch

    base = "nvidia.dali" if a.impl == "dali" else "sluice"
    plugin = importlib.import_module("nvidia.dali.plugin.pytorch" if a.impl == "dali" else "sluice.torch")
    pipe = build(base, a.root, a.batch, a.threads, fp16=not a.fp32, cpu=a.cpu)()
    pipe.build()
    loader = plugin.DALIGenericIterator(pipe, ["images", "boxes", "labels"], reader_name="Reader",
                                        last_batch_policy=plugin.LastBatchPolicy.FILL, auto_reset=True)
    sync = (lambda: None) if a.cpu else torch.cuda.synchronize
    for _ in loader:                                      # warm-up: one epoch
        pass
    sync()
    t, n, shapes = time.perf_counter(), 0, None
    for _ in range(a.epochs):
        for out in loader:
            n += out[0]["images"].shape[0]
            shapes = tuple(tuple(out[0][k].shape) for k in ("images", "boxes", "labels"))
    sync()
    rate = n / (time.perf_counter() - t)
    print(f"RESULT ssd {a.impl:7s} {rate:10.1f} img/s shapes={shapes}", flush=True)


if __name__ == "__main__":
    main()
