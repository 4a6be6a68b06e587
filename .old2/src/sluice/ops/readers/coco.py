"""``fn.readers.coco``: a COCO detection set (a folder of images and an annotations JSON), as DALI's COCO reader.

Outputs, in DALI's order: the encoded images, their boxes (``[x, y, w, h]``, or ``[l, t, r, b]`` with ``ltrb``;
in pixels, or relative to the image with ``ratio``), their labels (category ids mapped to 1..N in the order of
the file's categories, unless ``avoid_class_remapping``), then with ``polygon_masks`` the polygons
(``[mask index, first vertex, end vertex]``) and vertices (``[x, y]``), or with ``pixelwise_masks`` an
``H x W x 1`` INT32 mask holding each pixel's label (0: background; where objects overlap, the greater label),
and with ``image_ids`` each image's id. Images are ordered by id (or as ``images`` lists them); annotations
keep the file's order. Boxes whose width or height is under ``size_threshold`` are dropped; ``skip_empty``
leaves out images without annotations.

The images of a batch are read back to back into one buffer (page-locked for GPU pipelines), like
``readers.file``'s; the boxes and masks feed ``random_bbox_crop``, ``bb_flip``, ``slice``, ``flip`` and
``paste`` as they are.

Errors name the annotations file and the entry: a file that is not COCO JSON, an annotation whose image id no
image has, a ``bbox`` without 4 numbers, an image file that cannot be read (named with its path).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch

from sluice.backends import storage
from sluice.errors import ArgumentError, SampleError
from sluice.ops.readers._base import read_packed
from sluice.ops.readers.file import READER_ARGS, ReaderBase
from sluice.pipeline.batch import Batch
from sluice.pipeline.pool import map_all, runs
from sluice.schema import REQUIRED, Arg, BatchArgs, BatchContext, OpSchema, OpSpec


def _num_outputs(args: dict[str, Any]) -> int:
    return 3 + 2 * bool(args.get("polygon_masks")) + bool(args.get("pixelwise_masks")) + bool(args.get("image_ids"))


def _layouts(args: dict[str, Any], _inputs) -> list[str]:
    out = ["", "", ""]
    if args.get("polygon_masks"):
        out += ["", ""]
    if args.get("pixelwise_masks"):
        out.append("HWC")
    if args.get("image_ids"):
        out.append("")
    return out


SCHEMA = OpSchema(
    "readers.coco",
    doc="""Reads a COCO data set: images, boxes and labels, and optionally polygons, pixel masks and image ids.

    Outputs: ``images, boxes, labels[, polygons, vertices][, pixelwise_masks][, image_ids]``. ``file_root`` and
    ``annotations_file`` may be ``s3://`` URLs. Sharding, shuffling and padding are ``readers.file``'s.

    Example::

        images, boxes, labels = fn.readers.coco(file_root=root, annotations_file=ann, ratio=True, ltrb=True,
                                                skip_empty=True, random_shuffle=True, name="Reader")
        images = fn.decoders.image(images, device="mixed")
        anchor, shape, boxes, labels = fn.random_bbox_crop(boxes, labels, bbox_layout="xyXY",
                                                           thresholds=[0.1, 0.3, 0.5], scaling=[0.3, 1.0])
        images = fn.slice(images, anchor, shape)
    """,
    inputs=0,
    outputs=_num_outputs,
    devices=("cpu",),
    stateful=True,
    output_layout=_layouts,
    args=[
        Arg("file_root", str, REQUIRED, "Folder (or s3:// prefix) of the images; file_name entries are relative "
            "to it."),
        Arg("annotations_file", str, REQUIRED, "The COCO annotations JSON (instances_*.json)."),
        Arg("ltrb", bool, False, "Boxes as [left, top, right, bottom] (else [x, y, width, height])."),
        Arg("ratio", bool, False, "Box and vertex coordinates relative to the image size (else pixels)."),
        Arg("skip_empty", bool, False, "Leave out images without annotations."),
        Arg("size_threshold", float, 0.1, "Drop boxes whose width or height (pixels) is under this."),
        Arg("include_iscrowd", bool, True, "Keep annotations marked iscrowd=1."),
        Arg("polygon_masks", bool, False, "Output the segmentation polygons (polygons, vertices)."),
        Arg("pixelwise_masks", bool, False, "Output H x W x 1 INT32 masks of labels (needs pycocotools)."),
        Arg("image_ids", bool, False, "Output each image's id (INT32, shape [1])."),
        Arg("avoid_class_remapping", bool, False, "Keep the file's category ids (else 1..N in file order)."),
        Arg("images", "str_list", None, "Read these image file names (as in the annotations), in this order."),
        *READER_ARGS,
    ],
)


def _bad(where: str, what: str) -> ArgumentError:
    return ArgumentError(f"fn.readers.coco: annotations file '{where}' {what}")


class CocoSet:
    """The samples of an annotations file after DALI's selection: per image, its file, size, id, and its
    annotations' boxes, labels, polygons and segmentations (flat arrays with per-image offsets)."""

    def __init__(self, args: dict[str, Any]):
        where = args["annotations_file"]
        try:
            doc = json.loads(storage.read_text(where))
        except storage.StorageError as e:
            raise ArgumentError(f"fn.readers.coco: {e}") from None
        except ValueError as e:
            raise _bad(where, f"is not JSON: {e}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("images"), list):
            raise _bad(where, "is not COCO annotations: it has no 'images' list")
        try:
            infos = {int(im["id"]): im for im in doc["images"]}
        except (KeyError, TypeError, ValueError):
            raise _bad(where, "has an image entry without an integer 'id'") from None
        categories = [int(c["id"]) for c in doc.get("categories", [])]
        remap = {cid: k + 1 for k, cid in enumerate(categories)}
        keep_original = args["avoid_class_remapping"]
        threshold = float(args["size_threshold"])
        masks = args["polygon_masks"] or args["pixelwise_masks"]
        per_image: dict[int, list[dict]] = {i: [] for i in infos}
        for n, ann in enumerate(doc.get("annotations", [])):
            try:
                image_id = int(ann["image_id"])
                box = [float(x) for x in ann["bbox"]]
                category = int(ann["category_id"])
            except (KeyError, TypeError, ValueError):
                raise _bad(where, f"has an annotation (number {n}, id {ann.get('id')}) without an image_id, a "
                                  "category_id or a numeric bbox") from None
            if len(box) != 4:
                raise _bad(where, f"has an annotation (number {n}, id {ann.get('id')}) whose bbox has {len(box)} "
                                  "values, not 4")
            if image_id not in per_image:
                raise _bad(where, f"has an annotation (number {n}, id {ann.get('id')}) for image id {image_id}, "
                                  "which no entry of 'images' has")
            if not keep_original and category not in remap:
                raise _bad(where, f"has an annotation (number {n}, id {ann.get('id')}) of category {category}, "
                                  "which 'categories' does not list")
            if ann.get("iscrowd", 0) and not args["include_iscrowd"]:
                continue
            if box[2] < threshold or box[3] < threshold:
                continue
            per_image[image_id].append({"box": box, "label": category if keep_original else remap[category],
                                        "segmentation": ann.get("segmentation") if masks else None})
        if args["images"] is not None:
            by_name = {im.get("file_name"): i for i, im in infos.items()}
            order = [by_name[f] for f in args["images"] if f in by_name]
        else:
            order = sorted(infos)
        if args["skip_empty"]:
            order = [i for i in order if per_image[i]]
        self.ids = np.array(order, np.int32)
        self.files, self.sizes, boxes, labels, counts = [], [], [], [], []
        self.segmentations: list[list[Any]] = []
        for i in order:
            im = infos[i]
            try:
                self.files.append(storage.join(args["file_root"], im["file_name"]))
                w, h = float(im["width"]), float(im["height"])
            except (KeyError, TypeError, ValueError):
                raise _bad(where, f"has an image entry (id {i}) without file_name, width or height") from None
            self.sizes.append((h, w))
            anns = per_image[i]
            for a in anns:
                b = list(a["box"])
                if args["ltrb"]:
                    b[2] += b[0]
                    b[3] += b[1]
                if args["ratio"]:
                    b = [b[0] / w, b[1] / h, b[2] / w, b[3] / h]
                boxes.append(b)
                labels.append(a["label"])
            counts.append(len(anns))
            self.segmentations.append([a["segmentation"] for a in anns])
        self.boxes = np.asarray(boxes, np.float32).reshape(-1, 4)
        self.labels = np.asarray(labels, np.int32)
        self.first = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.ratio = bool(args["ratio"])
        self.where = where

    def __len__(self) -> int:
        return len(self.files)

    def polygons(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The polygons ([mask, first vertex, end vertex]) and vertices ([x, y]) of image ``k``; RLE
        segmentations (crowds) have no polygons."""
        polys, verts, start = [], [], 0
        h, w = self.sizes[k]
        for mask, seg in enumerate(self.segmentations[k]):
            if not isinstance(seg, list):
                continue
            for poly in seg:
                xy = np.asarray(poly, np.float32).reshape(-1, 2)
                if self.ratio:
                    xy = xy / np.array([w, h], np.float32)
                polys.append((mask, start, start + len(xy)))
                start += len(xy)
                verts.append(xy)
        return (np.asarray(polys, np.int32).reshape(-1, 3),
                np.concatenate(verts).astype(np.float32) if verts else np.zeros((0, 2), np.float32))

    def pixel_mask(self, k: int) -> np.ndarray:
        """The H x W x 1 INT32 label mask of image ``k``: each object's segmentation (polygons or RLE, rasterised
        by pycocotools, as DALI does with COCO's own mask code), greater labels drawn over smaller ones."""
        try:
            from pycocotools import mask as mask_utils
        except ImportError:
            raise ArgumentError("fn.readers.coco(pixelwise_masks=True) needs pycocotools: pip install "
                                "'sluice[coco]'") from None
        h, w = (int(x) for x in self.sizes[k])
        out = np.zeros((h, w, 1), np.int32)
        labels = self.labels[self.first[k]: self.first[k + 1]]
        for label in sorted(set(labels.tolist())):
            for seg, lab in zip(self.segmentations[k], labels.tolist()):
                if lab != label or not seg:
                    continue
                if isinstance(seg, list):
                    rle = mask_utils.merge(mask_utils.frPyObjects(seg, h, w))
                elif isinstance(seg.get("counts"), list):
                    rle = mask_utils.frPyObjects(seg, h, w)
                else:
                    rle = seg
                out[mask_utils.decode(rle).astype(bool), 0] = label
        return out


@SCHEMA.operator_class("cpu")
class COCOReader(ReaderBase):
    op_name = "fn.readers.coco"

    def __init__(self, spec: OpSpec):
        super().__init__(spec)
        a = spec.args
        if a["polygon_masks"] and a["pixelwise_masks"]:
            raise ArgumentError(f"{self.op_name}: polygon_masks and pixelwise_masks cannot both be True")
        self.data = CocoSet(a)
        if not len(self.data):
            raise ArgumentError(f"{self.op_name}: annotations file '{a['annotations_file']}' selects no images "
                                f"(skip_empty={a['skip_empty']}, images={a['images']})")
        self.setup_order(len(self.data))

    def run(self, ctx: BatchContext, *inputs: Batch, args: BatchArgs) -> tuple[Batch, ...]:
        d, a = self.data, self.spec.args
        picks = [i for i, _ in self.next_samples(ctx)]
        files = [d.files[i] for i in picks]
        n = len(picks)
        try:
            buf, _, sizes = read_packed(self.op_name, files, np.zeros(n, np.int64), np.full(n, -1, np.int64),
                                        files, pool=ctx.thread_pool, pin=self.pin_outputs,
                                        device_id=self.spec.device_id, what="image")
        except SampleError as e:
            raise SampleError(e.index, e.source, OSError(f"{e.cause} (an image of the annotations file "
                                                         f"'{d.where}')")) from None
        outs = [Batch.from_packed(buf[: int(sizes.sum())], sizes[:, None], "", files)]
        outs.append(Batch([torch.from_numpy(d.boxes[d.first[i]: d.first[i + 1]]) for i in picks], "", files))
        outs.append(Batch([torch.from_numpy(d.labels[d.first[i]: d.first[i + 1]]) for i in picks], "", files))
        if a["polygon_masks"]:
            pv = [d.polygons(i) for i in picks]
            outs.append(Batch([torch.from_numpy(p) for p, _ in pv], "", files))
            outs.append(Batch([torch.from_numpy(v) for _, v in pv], "", files))
        if a["pixelwise_masks"]:
            masks: list[torch.Tensor] = [None] * n  # type: ignore[list-item]

            def rasterise(run: range) -> None:
                for k in run:
                    try:
                        masks[k] = torch.from_numpy(d.pixel_mask(picks[k]))
                    except ArgumentError:  # pycocotools missing: not the sample's fault
                        raise
                    except Exception as e:  # noqa: BLE001 - named with its image
                        raise SampleError(k, files[k], ValueError(
                            f"cannot rasterise the segmentation of '{files[k]}' (annotations file "
                            f"'{d.where}'): {e}")) from e

            map_all(ctx.thread_pool, rasterise, runs(n, ctx.thread_pool))
            outs.append(Batch(masks, "HWC", files))
        if a["image_ids"]:
            outs.append(Batch.from_dense(torch.from_numpy(d.ids[picks].reshape(-1, 1)), "", files))
        return tuple(outs)
