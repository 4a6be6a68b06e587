"""fn.readers.coco against pycocotools reading the same annotations (boxes, labels, polygons, masks), the options
that select and transform them, bad annotation files, and images, boxes and masks that stay consistent through
random_bbox_crop, slice, flip / bb_flip and paste."""

import io
import json
import os

import numpy as np
import pytest
from PIL import Image

import sluice
from sluice import fn, types
from sluice.errors import PipelineError

pycocotools = pytest.importorskip("pycocotools")
from pycocotools.coco import COCO  # noqa: E402

COLORS = {3: (230, 30, 30), 7: (30, 230, 30), 9: (30, 30, 230)}  # category id -> the colour its objects have


def _rle(mask):
    """COCO's uncompressed RLE: run lengths of the column-major pixels, starting with a run of zeros."""
    flat = mask.flatten(order="F")
    edges = np.flatnonzero(np.diff(flat)) + 1
    runs = np.diff(np.concatenate([[0], edges, [flat.size]])).tolist()
    return ([0] if flat[0] else []) + runs


def make_coco(root, *, missing=None):
    """Images of coloured rectangles on grey (each rectangle an annotation of its colour's category), a crowd
    annotation in RLE, an image without objects, a box under the size threshold; ids not in file order."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    images, anns = [], []
    for n, image_id in enumerate([42, 5, 17, 8, 23]):
        h, w = 60 + 4 * n, 80 + 6 * n
        img = np.full((h, w, 3), 128, np.uint8)
        name = f"img_{image_id}.png"
        if image_id != 8:  # image 8 has no objects
            for k, cat in enumerate((3, 7, 9)[: 1 + n % 3]):
                x0, y0 = 4 + 24 * k, int(rng.integers(2, 20))
                bw, bh = 18, int(rng.integers(15, 30))
                img[y0:y0 + bh, x0:x0 + bw] = COLORS[cat]
                poly = [x0, y0, x0 + bw, y0, x0 + bw, y0 + bh, x0, y0 + bh]
                anns.append({"id": len(anns) + 1, "image_id": image_id, "category_id": cat, "iscrowd": 0,
                             "bbox": [x0, y0, bw, bh], "area": bw * bh, "segmentation": [poly]})
        if image_id == 17:
            crowd = np.zeros((h, w), np.uint8)
            crowd[40:50, 70:80] = 1
            img[40:50, 70:80] = COLORS[7]
            anns.append({"id": len(anns) + 1, "image_id": image_id, "category_id": 7, "iscrowd": 1,
                         "bbox": [70, 40, 10, 10], "area": 100, "segmentation": {"size": [h, w],
                                                                                 "counts": _rle(crowd)}})
            anns.append({"id": len(anns) + 1, "image_id": image_id, "category_id": 3, "iscrowd": 0,
                         "bbox": [1, 1, 0.05, 5], "area": 0.25, "segmentation": [[1, 1, 1.05, 1, 1.05, 6]]})
        Image.fromarray(img).save(root / name)
        images.append({"id": image_id, "file_name": name, "height": h, "width": w})
    doc = {"images": images, "annotations": anns,
           "categories": [{"id": 9, "name": "blue"}, {"id": 3, "name": "red"}, {"id": 7, "name": "green"}]}
    if missing:
        (root / missing).unlink()
    path = root / "instances.json"
    path.write_text(json.dumps(doc))
    return str(root), str(path)


def read_coco(batch_size, **kw):
    @sluice.pipeline_def(batch_size=batch_size, num_threads=2, device_id=None, seed=4, exec_async=False)
    def pipe():
        return tuple(fn.readers.coco(name="R", **kw))

    p = pipe()
    return p, p.run()


REMAP = {9: 1, 3: 2, 7: 3}  # 1..N in the order of the file's categories


def test_boxes_labels_and_polygons_equal_pycocotools(tmp_path):
    root, ann = make_coco(tmp_path)
    ref = COCO(ann)
    p, out = read_coco(5, file_root=root, annotations_file=ann, polygon_masks=True, image_ids=True)
    images, boxes, labels, polygons, vertices, ids = out
    assert ids.as_tensor().flatten().tolist() == sorted(ref.getImgIds())
    for k, image_id in enumerate(sorted(ref.getImgIds())):
        info = ref.loadImgs(image_id)[0]
        assert bytes(images[k].numpy()) == (tmp_path / info["file_name"]).read_bytes()
        anns = [a for a in ref.loadAnns(ref.getAnnIds(imgIds=image_id)) if min(a["bbox"][2:]) >= 0.1]
        assert boxes[k].numpy().tolist() == [a["bbox"] for a in anns]
        assert labels[k].tolist() == [REMAP[a["category_id"]] for a in anns]
        polys = [(m, a) for m, a in enumerate(anns) if isinstance(a["segmentation"], list)]
        want = np.concatenate([np.asarray(a["segmentation"][0], np.float32).reshape(-1, 2) for _, a in polys]) \
            if polys else np.zeros((0, 2), np.float32)
        assert np.array_equal(vertices[k].numpy(), want)
        assert polygons[k].numpy().tolist() == [[m, 4 * j, 4 * j + 4] for j, (m, _) in enumerate(polys)]
    assert images.source_info[0].endswith("img_5.png") and p.reader_meta("R")["epoch_size"] == 5


def test_pixelwise_masks_equal_pycocotools(tmp_path):
    root, ann = make_coco(tmp_path)
    ref = COCO(ann)
    _, out = read_coco(5, file_root=root, annotations_file=ann, pixelwise_masks=True)
    masks = out[3]
    assert masks.layout() == "HWC"
    for k, image_id in enumerate(sorted(ref.getImgIds())):
        info = ref.loadImgs(image_id)[0]
        want = np.zeros((info["height"], info["width"]), np.int32)
        for a in sorted(ref.loadAnns(ref.getAnnIds(imgIds=image_id)), key=lambda a: REMAP[a["category_id"]]):
            if min(a["bbox"][2:]) >= 0.1:
                want[ref.annToMask(a).astype(bool)] = REMAP[a["category_id"]]
        assert masks[k].dtype.itemsize == 4 and np.array_equal(masks[k].numpy()[..., 0], want)


def test_options(tmp_path):
    root, ann = make_coco(tmp_path)
    ref = COCO(ann)
    _, out = read_coco(4, file_root=root, annotations_file=ann, skip_empty=True, ltrb=True, ratio=True,
                       include_iscrowd=False, avoid_class_remapping=True, size_threshold=0.0)
    ids = [i for i in sorted(ref.getImgIds()) if i != 8]
    for k, image_id in enumerate(ids):
        info = ref.loadImgs(image_id)[0]
        anns = [a for a in ref.loadAnns(ref.getAnnIds(imgIds=image_id)) if not a["iscrowd"]]
        want = [[x / info["width"], y / info["height"], (x + w) / info["width"], (y + h) / info["height"]]
                for x, y, w, h in (a["bbox"] for a in anns)]
        assert np.allclose(out[1][k].numpy(), want, atol=1e-6)
        assert out[2][k].tolist() == [a["category_id"] for a in anns]
    _, out = read_coco(2, file_root=root, annotations_file=ann, images=["img_23.png", "img_5.png"])
    assert out[0].source_info[0].endswith("img_23.png") and out[0].source_info[1].endswith("img_5.png")


def test_bad_annotations_are_named(tmp_path):
    root, ann = make_coco(tmp_path, missing="img_17.png")
    with pytest.raises(PipelineError, match=r"img_17.png'.*an image of the annotations file '.*instances.json'"):
        read_coco(5, file_root=root, annotations_file=ann)
    doc = json.loads(open(ann).read())
    doc["annotations"][0]["image_id"] = 999
    open(ann, "w").write(json.dumps(doc))
    with pytest.raises(ValueError, match=r"instances.json' has an annotation \(number 0, id 1\) for image id 999, "
                                         "which no entry of 'images' has"):
        read_coco(5, file_root=root, annotations_file=ann)
    doc["annotations"][0]["image_id"], doc["annotations"][0]["bbox"] = 42, [1, 2, 3]
    open(ann, "w").write(json.dumps(doc))
    with pytest.raises(ValueError, match="bbox has 3 values, not 4"):
        read_coco(5, file_root=root, annotations_file=ann)
    open(ann, "w").write("{not json")
    with pytest.raises(ValueError, match="instances.json' is not JSON"):
        read_coco(5, file_root=root, annotations_file=ann)


def test_images_boxes_and_masks_stay_consistent_through_augmentation(tmp_path):
    """Crop (random_bbox_crop + slice), flip (flip + bb_flip) and paste applied to the images, boxes and pixel
    masks: every box still encloses its object's colour, and every mask pixel of a label has that label's colour."""
    root, ann = make_coco(tmp_path)
    color_of = {REMAP[c]: np.array(v) for c, v in COLORS.items()}

    @sluice.pipeline_def(batch_size=5, num_threads=2, device_id=None, seed=11)
    def pipe():
        jpegs, boxes, labels, masks = fn.readers.coco(file_root=root, annotations_file=ann, ltrb=True, ratio=True,
                                                      skip_empty=True, pixelwise_masks=True, random_shuffle=True,
                                                      include_iscrowd=False)
        images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
        anchor, shape, boxes, labels = fn.random_bbox_crop(boxes, labels, bbox_layout="xyXY", scaling=[0.5, 1.0],
                                                           aspect_ratio=[0.5, 2.0], thresholds=[0.1, 0.3],
                                                           allow_no_crop=True, num_attempts=50)
        images = fn.slice(images, anchor, shape)
        masks = fn.slice(masks, anchor, shape)
        flip = fn.random.coin_flip(probability=0.5)
        images = fn.flip(images, horizontal=flip)
        masks = fn.flip(masks, horizontal=flip)
        boxes = fn.bb_flip(boxes, ltrb=True, horizontal=flip)
        px = fn.random.uniform(range=[0.0, 1.0])
        images = fn.paste(images, ratio=1.5, paste_x=px, paste_y=0.25, fill_value=(0, 0, 0))
        masks = fn.paste(masks, ratio=1.5, paste_x=px, paste_y=0.25, fill_value=(0,))
        return images, boxes, labels, masks, px, flip

    p = pipe()
    checked = 0
    for _ in range(4):
        images, boxes, labels, masks, pxs, flips = p.run()
        for img, bx, lb, mk, px in zip(images, boxes, labels, masks, pxs):
            img, mk = img.numpy(), mk.numpy()[..., 0]
            ch, cw = img.shape[:2]
            h, w = round(ch / 1.5), round(cw / 1.5)
            x0, y0 = round(float(px) * (cw - w)), round(0.25 * (ch - h))
            for (l, t, r, b), label in zip(bx.numpy(), lb.tolist()):
                # box in the crop's [0, 1] coordinates -> pixels of the canvas, one pixel inside
                cl, ct = int(np.ceil(x0 + l * w)) + 1, int(np.ceil(y0 + t * h)) + 1
                cr, cb = int(x0 + r * w) - 1, int(y0 + b * h) - 1
                if cr - cl < 2 or cb - ct < 2:
                    continue
                inside = img[ct:cb, cl:cr].reshape(-1, 3).astype(int)
                assert np.abs(np.median(inside, 0) - color_of[label]).max() <= 12
                assert (mk[ct:cb, cl:cr] == label).mean() > 0.95
                checked += 1
            for label, color in color_of.items():
                pixels = img[mk == label].astype(int)
                if len(pixels):
                    assert np.abs(np.median(pixels, 0) - color).max() <= 12
    assert checked > 10


def _same_outputs(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert len(x) == len(y) and x.layout() == y.layout()
        for k in range(len(x)):
            u, v = x[k].numpy(), y[k].numpy()
            assert u.dtype == v.dtype and u.shape == v.shape and np.array_equal(u, v)
        assert list(x.source_info) == list(y.source_info)


@pytest.mark.parametrize("opts", [
    dict(polygon_masks=True, image_ids=True),
    dict(pixelwise_masks=True, image_ids=True, skip_empty=True, ratio=True, ltrb=True),
    dict(include_iscrowd=False, avoid_class_remapping=True, size_threshold=0.0, ratio=True, polygon_masks=True),
    dict(images=["img_23.png", "img_5.png", "img_17.png"], image_ids=True, polygon_masks=True),
])
def test_preprocessed_annotations_round_trip(tmp_path, opts):
    """Saved with save_preprocessed_annotations, read back with preprocessed_annotations (the JSON gone): the same
    images, boxes, labels, polygons / masks and ids, over two epochs of a shuffled reader."""
    root, ann = make_coco(tmp_path / "coco")
    saved = str(tmp_path / "pre")
    outputs = ("polygon_masks", "pixelwise_masks", "image_ids")
    kw = dict(file_root=root, random_shuffle=True, initial_fill=3, **{k: v for k, v in opts.items() if k in outputs})
    selection = {k: v for k, v in opts.items() if k not in outputs}
    p, first = read_coco(3, annotations_file=ann, save_preprocessed_annotations=True,
                         save_preprocessed_annotations_dir=saved, **kw, **selection)
    want = [first, p.run()]
    assert sorted(os.listdir(saved)) == ["sluice_coco_arrays.npz", "sluice_coco_index.json"]
    os.unlink(ann)
    p, got = read_coco(3, preprocessed_annotations=saved, **kw)
    for w, g in zip(want, [got, p.run()]):
        _same_outputs(w, g)


def test_preprocessed_annotations_masks_from_a_save_without_masks(tmp_path):
    """The saving run keeps the segmentations even when it outputs none: a later reader may ask for them."""
    root, ann = make_coco(tmp_path / "coco")
    saved = str(tmp_path / "pre")
    read_coco(5, file_root=root, annotations_file=ann, save_preprocessed_annotations=True,
              save_preprocessed_annotations_dir=saved)
    _, want = read_coco(5, file_root=root, annotations_file=ann, pixelwise_masks=True)
    _, got = read_coco(5, file_root=root, preprocessed_annotations=saved, pixelwise_masks=True)
    _same_outputs(want, got)


@pytest.mark.parametrize("kw, match", [
    (dict(annotations_file="a.json", save_preprocessed_annotations=True),
     "save_preprocessed_annotations and save_preprocessed_annotations_dir are given together"),
    (dict(annotations_file="a.json", save_preprocessed_annotations_dir="d"),
     "save_preprocessed_annotations and save_preprocessed_annotations_dir are given together"),
    (dict(), "give annotations_file .* or preprocessed_annotations"),
    (dict(preprocessed_annotations="d", annotations_file="a.json"),
     "with preprocessed_annotations, annotations_file cannot be given"),
    (dict(preprocessed_annotations="d", ratio=True, skip_empty=True),
     "with preprocessed_annotations, skip_empty, ratio cannot be given"),
    (dict(preprocessed_annotations="d", images=["x.png"]), "with preprocessed_annotations, images cannot"),
    (dict(preprocessed_annotations="d", save_preprocessed_annotations=True, save_preprocessed_annotations_dir="e"),
     "save_preprocessed_annotations saves what annotations_file parses; with preprocessed_annotations there is "
     "nothing new to save"),
])
def test_preprocessed_annotations_argument_conflicts(tmp_path, kw, match):
    with pytest.raises(ValueError, match=r"fn.readers.coco: " + match):
        read_coco(1, file_root=str(tmp_path), **kw)


def test_preprocessed_annotations_missing_or_corrupt_are_named(tmp_path):
    root, ann = make_coco(tmp_path / "coco")
    saved = tmp_path / "pre"
    missing = str(tmp_path / "nowhere")
    with pytest.raises(ValueError, match=rf"fn.readers.coco: preprocessed annotations '{missing}' cannot be read"):
        read_coco(1, file_root=root, preprocessed_annotations=missing)
    read_coco(1, file_root=root, annotations_file=ann, save_preprocessed_annotations=True,
              save_preprocessed_annotations_dir=str(saved))
    index = saved / "sluice_coco_index.json"
    arrays = saved / "sluice_coco_arrays.npz"
    good_index, good_arrays = index.read_text(), arrays.read_bytes()

    def expect(match):
        with pytest.raises(ValueError, match=rf"fn.readers.coco: preprocessed annotations '{saved}' {match}"):
            read_coco(1, file_root=root, preprocessed_annotations=str(saved), polygon_masks=True)

    index.write_text("{trunc")
    expect("are corrupt: sluice_coco_index.json is not JSON")
    index.write_text(json.dumps({"format": "something else"}))
    expect("are corrupt: sluice_coco_index.json is not a sluice preprocessed-annotations index")
    index.write_text(good_index)
    arrays.write_bytes(good_arrays[: len(good_arrays) // 2])
    expect("are corrupt: sluice_coco_arrays.npz is not a readable NumPy .npz file")
    arrays.unlink()
    expect("cannot be read")
    z = dict(np.load(io.BytesIO(good_arrays)))
    np.savez(arrays, **{**z, "boxes": z["boxes"][:-1]})
    expect(r"are corrupt: array 'boxes' is float32 \[\d+, 4\], not float32 \[\d+, 4\]")
    np.savez(arrays, **{k: v for k, v in z.items() if k != "labels"})
    expect("are corrupt: 'labels' is missing")
    doc = json.loads(good_index)
    np.savez(arrays, **z)
    index.write_text(json.dumps({**doc, "version": 7}))
    expect("have version 7")
    index.write_text(json.dumps({**doc, "file_names": doc["file_names"][:-1]}))
    expect(r"are corrupt: array 'ids' is int32 \[5\], not int32 \[4\]")


def test_dali_deprecated_names_of_the_preprocessed_arguments(tmp_path):
    """DALI's dump_meta_files / dump_meta_files_path / meta_files_path work through sluice.compat, with a
    DeprecationWarning naming the new argument, and save and read the same directory."""
    from sluice.compat.dali import fn as dali_fn

    root, ann = make_coco(tmp_path / "coco")
    saved = str(tmp_path / "pre")

    @sluice.pipeline_def(batch_size=5, num_threads=1, device_id=None, exec_async=False)
    def pipe(**kw):
        return tuple(dali_fn.readers.coco(file_root=root, save_img_ids=True, **kw))

    with pytest.warns(DeprecationWarning) as record:
        want = pipe(annotations_file=ann, dump_meta_files=True, dump_meta_files_path=saved).run()
        got = pipe(meta_files_path=saved).run()
    assert {str(w.message) for w in record} >= {
        "fn.readers.coco: argument 'dump_meta_files' is deprecated; use 'save_preprocessed_annotations'",
        "fn.readers.coco: argument 'dump_meta_files_path' is deprecated; use 'save_preprocessed_annotations_dir'",
        "fn.readers.coco: argument 'meta_files_path' is deprecated; use 'preprocessed_annotations'",
        "fn.readers.coco: argument 'save_img_ids' is deprecated; use 'image_ids'"}
    assert len(want) == 4  # image ids
    _same_outputs(want, got)
