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

Preprocessed annotations (DALI's ``save_preprocessed_annotations`` / ``preprocessed_annotations``): a run with
``save_preprocessed_annotations=True`` writes the samples as selected and transformed (after ``skip_empty``,
``size_threshold``, ``include_iscrowd``, ``images``, class remapping, ``ltrb`` and ``ratio``, as DALI stores them)
to ``save_preprocessed_annotations_dir``; a later reader given ``preprocessed_annotations=DIR`` reads them from
there instead of the JSON and yields the same samples. The files are sluice's own (DALI's ``*.dat`` files are not
read, nor are sluice's readable by DALI):

* ``sluice_coco_index.json``: ``{"format": "sluice-coco-preprocessed", "version": 1, "source": <annotations
  file>, "ltrb", "ratio", "segmentation": <whether segmentations are saved>, "file_names": [...] (relative to
  file_root, one per sample), "other_segmentations": {<annotation index>: <a segmentation that is not a list of
  polygons, e.g. a crowd's RLE, as the JSON had it>}}``;
* ``sluice_coco_arrays.npz`` (``numpy.savez``, no pickles): ``ids`` INT32 [N], ``sizes`` FLOAT64 [N, 2] (height,
  width), ``first`` INT64 [N + 1] (each sample's first annotation), ``boxes`` FLOAT32 [M, 4], ``labels`` INT32
  [M], and with segmentations ``seg_kind`` INT8 [M] (0 none, 1 polygons, 2 other), ``seg_first`` INT64 [M + 1]
  (each annotation's first polygon), ``poly_first`` INT64 [P + 1] (each polygon's first coordinate) and
  ``coords`` FLOAT64 [C] (the polygons' x, y as the JSON had them, in pixels).

The index is written last, so a directory whose writing was cut short reads as missing it.
"""

from __future__ import annotations

import io
import json
import os
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

    ``save_preprocessed_annotations=True, save_preprocessed_annotations_dir=d`` saves the parsed samples (after
    the selection, class remapping, ``ltrb`` and ``ratio``, as DALI saves them) to ``d``, in sluice's own files
    (a JSON index and a NumPy ``.npz``; not DALI's ``*.dat``); a later ``fn.readers.coco(file_root=root,
    preprocessed_annotations=d)`` yields the same samples without reading the JSON. DALI's deprecated
    ``dump_meta_files``, ``dump_meta_files_path`` and ``meta_files_path`` work through ``sluice.compat``.
    """,
    inputs=0,
    outputs=_num_outputs,
    devices=("cpu",),
    stateful=True,
    output_layout=_layouts,
    args=[
        Arg("file_root", str, REQUIRED, "Folder (or s3:// prefix) of the images; file_name entries are relative "
            "to it."),
        Arg("annotations_file", str, "", "The COCO annotations JSON (instances_*.json); required unless "
            "preprocessed_annotations is given."),
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
        Arg("preprocessed_annotations", str, "", "A directory written by an earlier reader with "
            "save_preprocessed_annotations: its samples are read from there, not from annotations_file (which "
            "is then not given, nor are skip_empty, ratio, ltrb, images or size_threshold: the saved samples "
            "already carry them; include_iscrowd and avoid_class_remapping have no effect). The files are "
            "sluice's own format (JSON index + NumPy arrays), not DALI's *.dat files. May be an s3:// prefix."),
        Arg("save_preprocessed_annotations", bool, False, "Save the parsed and selected annotations to "
            "save_preprocessed_annotations_dir (sluice's format, not DALI's), for preprocessed_annotations."),
        Arg("save_preprocessed_annotations_dir", str, "", "The local directory (created if missing) that "
            "save_preprocessed_annotations writes to; given together with it."),
        *READER_ARGS,
    ],
)


_FORMAT, _VERSION = "sluice-coco-preprocessed", 1
_INDEX, _ARRAYS = "sluice_coco_index.json", "sluice_coco_arrays.npz"


def _expect(a: np.ndarray, dtype: Any, shape: tuple[int, ...], name: str) -> None:
    if a.dtype != dtype or a.shape != shape:
        raise ValueError(f"array '{name}' is {a.dtype} {list(a.shape)}, not {np.dtype(dtype)} {list(shape)}")


def _offsets(first: np.ndarray, end: int, name: str) -> None:
    if len(first) == 0 or first[0] != 0 or first[-1] != end or np.any(np.diff(first) < 0):
        raise ValueError(f"array '{name}' is not a list of offsets from 0 to {end}")


def _bad(where: str, what: str) -> ArgumentError:
    return ArgumentError(f"fn.readers.coco: annotations file '{where}' {what}")


class CocoSet:
    """The samples of an annotations file after DALI's selection: per image, its file, size, id, and its
    annotations' boxes, labels, polygons and segmentations (flat arrays with per-image offsets)."""

    def __init__(self, args: dict[str, Any], clients: storage.S3Clients | None = None):
        where = args["annotations_file"]
        try:
            doc = json.loads(storage.read_text(where, clients=clients))
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
        masks = args["polygon_masks"] or args["pixelwise_masks"] or args["save_preprocessed_annotations"]
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
        self.files, self.names, self.sizes, boxes, labels, counts = [], [], [], [], [], []
        self.segmentations: list[list[Any]] = []
        for i in order:
            im = infos[i]
            try:
                self.files.append(storage.join(args["file_root"], im["file_name"]))
                w, h = float(im["width"]), float(im["height"])
                self.names.append(str(im["file_name"]))
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
        self.ltrb = bool(args["ltrb"])
        self.has_segmentation = bool(masks)
        self.where = where
        self.described = f"annotations file '{where}'"

    def __len__(self) -> int:
        return len(self.files)

    def save(self, folder: str) -> None:
        """Write the samples to ``folder`` in sluice's preprocessed format (the module's doc describes it)."""
        if storage.is_url(folder):
            raise ArgumentError(f"fn.readers.coco: save_preprocessed_annotations_dir '{folder}' must be a local "
                                "directory")
        arrays = {"ids": self.ids, "sizes": np.asarray(self.sizes, np.float64).reshape(-1, 2), "first": self.first,
                  "boxes": self.boxes, "labels": self.labels}
        other: dict[str, Any] = {}
        if self.has_segmentation:
            kinds, seg_first, poly_first, coords = [], [0], [0], []
            for seg in (seg for image in self.segmentations for seg in image):
                if isinstance(seg, list):
                    kinds.append(1)
                    for poly in seg:
                        coords.extend(float(c) for c in poly)
                        poly_first.append(len(coords))
                else:
                    kinds.append(0 if seg is None else 2)
                    if seg is not None:
                        other[str(len(kinds) - 1)] = seg
                seg_first.append(len(poly_first) - 1)
            arrays.update(seg_kind=np.asarray(kinds, np.int8), seg_first=np.asarray(seg_first, np.int64),
                          poly_first=np.asarray(poly_first, np.int64), coords=np.asarray(coords, np.float64))
        index = {"format": _FORMAT, "version": _VERSION, "source": self.where, "ltrb": self.ltrb,
                 "ratio": self.ratio, "segmentation": self.has_segmentation, "file_names": self.names,
                 "other_segmentations": other}
        try:
            os.makedirs(folder, exist_ok=True)
            for path in (os.path.join(folder, _INDEX), os.path.join(folder, _ARRAYS)):
                if os.path.exists(path):
                    os.unlink(path)  # a directory being rewritten reads as incomplete until the index is back
            np.savez(os.path.join(folder, _ARRAYS), **arrays)
            tmp = os.path.join(folder, _INDEX + ".tmp")
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(index, f)
            os.replace(tmp, os.path.join(folder, _INDEX))
        except OSError as e:
            raise ArgumentError(f"fn.readers.coco: cannot save the preprocessed annotations to '{folder}': "
                                f"{e.strerror or e}") from None

    @classmethod
    def load(cls, args: dict[str, Any], clients: storage.S3Clients | None = None) -> CocoSet:
        """The samples saved in ``args["preprocessed_annotations"]`` by :meth:`save` (read through ``clients``
        where they are in S3); a missing or corrupt directory raises an ArgumentError naming it."""
        folder = args["preprocessed_annotations"]

        def bad(what: str) -> ArgumentError:
            return ArgumentError(f"fn.readers.coco: preprocessed annotations '{folder}' {what} (write them with "
                                 "save_preprocessed_annotations=True)")

        try:
            index = json.loads(storage.read_text(storage.join(folder, _INDEX), clients=clients))
        except storage.StorageError as e:
            raise bad(f"cannot be read: {e}") from None
        except ValueError as e:
            raise bad(f"are corrupt: {_INDEX} is not JSON ({e})") from None
        if not isinstance(index, dict) or index.get("format") != _FORMAT:
            raise bad(f"are corrupt: {_INDEX} is not a sluice preprocessed-annotations index")
        if index.get("version") != _VERSION:
            raise bad(f"have version {index.get('version')!r}; this sluice reads version {_VERSION}")
        try:
            data = storage.read_bytes(storage.join(folder, _ARRAYS), clients=clients)
            with np.load(io.BytesIO(data), allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
        except storage.StorageError as e:
            raise bad(f"cannot be read: {e}") from None
        except Exception as e:  # noqa: BLE001 - zipfile.BadZipFile, a bad .npy header...: named with the folder
            raise bad(f"are corrupt: {_ARRAYS} is not a readable NumPy .npz file ({type(e).__name__}: {e})") from None
        self = cls.__new__(cls)
        try:
            names = [str(n) for n in index["file_names"]]
            segmented = bool(index["segmentation"])
            other = dict(index["other_segmentations"])
            self.ratio, self.ltrb = bool(index["ratio"]), bool(index["ltrb"])
            ids, sizes, first = arrays["ids"], arrays["sizes"], arrays["first"]
            boxes, labels = arrays["boxes"], arrays["labels"]
            n, m = len(names), len(labels)
            _expect(ids, np.int32, (n,), "ids")
            _expect(sizes, np.float64, (n, 2), "sizes")
            _expect(first, np.int64, (n + 1,), "first")
            _expect(boxes, np.float32, (m, 4), "boxes")
            _expect(labels, np.int32, (m,), "labels")
            _offsets(first, m, "first")
            if segmented:
                kinds, seg_first = arrays["seg_kind"], arrays["seg_first"]
                poly_first, coords = arrays["poly_first"], arrays["coords"]
                _expect(kinds, np.int8, (m,), "seg_kind")
                _expect(seg_first, np.int64, (m + 1,), "seg_first")
                _offsets(seg_first, len(poly_first) - 1, "seg_first")
                _expect(poly_first, np.int64, (len(poly_first),), "poly_first")
                _expect(coords, np.float64, (len(coords),), "coords")
                _offsets(poly_first, len(coords), "poly_first")
                if np.any((kinds < 0) | (kinds > 2)):
                    raise ValueError("array 'seg_kind' holds values other than 0, 1 and 2")
        except KeyError as e:
            raise bad(f"are corrupt: {e.args[0]!r} is missing") from None
        except (TypeError, ValueError) as e:
            raise bad(f"are corrupt: {e}") from None
        masks = args["polygon_masks"] or args["pixelwise_masks"]
        if masks and not segmented:
            raise bad("hold no segmentations, which polygon_masks / pixelwise_masks need")
        self.ids, self.first, self.boxes, self.labels = ids, first, boxes, labels
        self.names = names
        self.files = [storage.join(args["file_root"], name) for name in names]
        self.sizes = [(float(h), float(w)) for h, w in sizes]
        self.has_segmentation = segmented
        self.segmentations = []
        for k in range(n):
            anns = range(int(first[k]), int(first[k + 1]))
            if not masks:
                self.segmentations.append([None] * len(anns))
                continue
            segs: list[Any] = []
            for j in anns:
                if kinds[j] == 1:
                    segs.append([coords[poly_first[p]: poly_first[p + 1]].tolist()
                                 for p in range(seg_first[j], seg_first[j + 1])])
                else:
                    segs.append(other.get(str(j)) if kinds[j] == 2 else None)
            self.segmentations.append(segs)
        self.where = folder
        self.described = f"preprocessed annotations '{folder}'"
        return self

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


# DALI's CocoLoader refuses these with preprocessed_annotations: the saved samples already carry them
_FIXED_BY_SAVED = {"annotations_file": "", "skip_empty": False, "ratio": False, "ltrb": False, "images": None,
                   "size_threshold": 0.1}


def _check_preprocessed_args(a: dict[str, Any]) -> None:
    if bool(a["save_preprocessed_annotations"]) != bool(a["save_preprocessed_annotations_dir"]):
        raise ArgumentError("fn.readers.coco: save_preprocessed_annotations and save_preprocessed_annotations_dir "
                            "are given together (got save_preprocessed_annotations="
                            f"{a['save_preprocessed_annotations']}, save_preprocessed_annotations_dir="
                            f"{a['save_preprocessed_annotations_dir']!r})")
    if not a["preprocessed_annotations"]:
        if not a["annotations_file"]:
            raise ArgumentError("fn.readers.coco: give annotations_file (a COCO JSON) or preprocessed_annotations "
                                "(a directory saved with save_preprocessed_annotations)")
        return
    given = [k for k, default in _FIXED_BY_SAVED.items() if a[k] != default]
    if given:
        raise ArgumentError(f"fn.readers.coco: with preprocessed_annotations, {', '.join(given)} cannot be given: "
                            "the saved samples were selected and converted when they were saved")
    if a["save_preprocessed_annotations"]:
        raise ArgumentError("fn.readers.coco: save_preprocessed_annotations saves what annotations_file parses; "
                            "with preprocessed_annotations there is nothing new to save")


@SCHEMA.operator_class("cpu")
class COCOReader(ReaderBase):
    op_name = "fn.readers.coco"

    def __init__(self, spec: OpSpec):
        super().__init__(spec)
        a = spec.args
        if a["polygon_masks"] and a["pixelwise_masks"]:
            raise ArgumentError(f"{self.op_name}: polygon_masks and pixelwise_masks cannot both be True")
        _check_preprocessed_args(a)
        if a["preprocessed_annotations"]:
            self.data = CocoSet.load(a, self.s3)
            if not len(self.data):
                raise ArgumentError(f"{self.op_name}: preprocessed annotations '{a['preprocessed_annotations']}' "
                                    "hold no images")
        else:
            self.data = CocoSet(a, self.s3)
            if not len(self.data):
                raise ArgumentError(f"{self.op_name}: annotations file '{a['annotations_file']}' selects no "
                                    f"images (skip_empty={a['skip_empty']}, images={a['images']})")
            if a["save_preprocessed_annotations"]:
                self.data.save(a["save_preprocessed_annotations_dir"])
        self.setup_order(len(self.data))

    def run(self, ctx: BatchContext, *inputs: Batch, args: BatchArgs) -> tuple[Batch, ...]:
        d, a = self.data, self.spec.args
        picks = [i for i, _ in self.next_samples(ctx)]
        files = [d.files[i] for i in picks]
        n = len(picks)
        try:
            buf, _, sizes = read_packed(self.op_name, files, np.zeros(n, np.int64), np.full(n, -1, np.int64),
                                        files, pool=ctx.thread_pool, pin=self.pin_outputs,
                                        device_id=self.spec.device_id, what="image", clients=self.s3)
        except SampleError as e:
            raise SampleError(e.index, e.source, OSError(f"{e.cause} (an image of the {d.described})")) from None
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
                            f"cannot rasterise the segmentation of '{files[k]}' ({d.described}): {e}")) from e

            map_all(ctx.thread_pool, rasterise, runs(n, ctx.thread_pool))
            outs.append(Batch(masks, "HWC", files))
        if a["image_ids"]:
            outs.append(Batch.from_dense(torch.from_numpy(d.ids[picks].reshape(-1, 1)), "", files))
        return tuple(outs)
