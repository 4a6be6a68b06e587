"""Exact resume: a pipeline (or an iterator) checkpointed after k iterations and restored into a new one yields
exactly the iterations the uninterrupted run yields next. One generic round trip runs over every stateful
operator of the registry (readers, sources, random operators); the reference is the uninterrupted run itself."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from sluice import Pipeline, fn
from sluice.errors import PipelineError
from sluice.schema import REGISTRY
from sluice.torch import DALIGenericIterator, LastBatchPolicy

BATCH = 3


def _write_images(folder, n, size=12):
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        arr = (np.arange(size * size * 3, dtype=np.uint16).reshape(size, size, 3) * (i + 1) % 251).astype(np.uint8)
        p = folder / f"{i:03d}.jpg"
        Image.fromarray(arr).save(p, quality=90)
        paths.append(str(p))
    return paths


# How to build a small graph around each stateful operator. Each builder gets a tmp folder and returns the
# pipeline's outputs (built inside `with pipe:`).
def _b_readers_file(tmp):
    files = [tmp / f"{i}.bin" for i in range(11)]
    for i, f in enumerate(files):
        f.write_bytes(bytes([i]))
    data, label = fn.readers.file(files=[str(f) for f in files], random_shuffle=True, initial_fill=4,
                                  name="R")
    return data, label


def _b_external_source(tmp):
    return fn.external_source(source=lambda info: np.full((BATCH, 2), info.iteration, np.int32), batch_info=True,
                              name="S")


def _b_random_no_input(name):
    def build(tmp):
        return getattr(fn.random, name)(shape=[2])
    return build


def _b_random_choice(tmp):
    return fn.random.choice(np.array([10, 20, 30, 40], np.int32), shape=[2])


def _b_image_random_crop(tmp):
    paths = _write_images(tmp / "imgs", 5)
    jpegs, _ = fn.readers.file(files=paths, random_shuffle=True, initial_fill=3, name="R")
    return fn.decoders.image_random_crop(jpegs, device="cpu")


def _b_random_resized_crop(tmp):
    paths = _write_images(tmp / "imgs", 5)
    jpegs, _ = fn.readers.file(files=paths, random_shuffle=True, initial_fill=3, name="R")
    return fn.random_resized_crop(fn.decoders.image(jpegs, device="cpu"), size=[6, 6])


def _b_jitter(tmp):
    paths = _write_images(tmp / "imgs", 5)
    jpegs, _ = fn.readers.file(files=paths, random_shuffle=True, initial_fill=3, name="R")
    return fn.jitter(fn.decoders.image(jpegs, device="cpu"), nDegree=2)


def _b_random_bbox_crop(tmp):
    boxes = fn.external_source(source=lambda: [np.array([[0.1, 0.1, 0.6, 0.7], [0.3, 0.2, 0.9, 0.8]],
                                                        np.float32)] * BATCH)
    return tuple(fn.random_bbox_crop(boxes, thresholds=[0.0], scaling=[0.3, 1.0], aspect_ratio=[0.5, 2.0],
                                       allow_no_crop=False, num_attempts=10))


def _b_readers_sequence(tmp):
    for s in range(2):
        _write_images(tmp / "seq" / f"s{s}", 6, size=8)
    return fn.readers.sequence(file_root=str(tmp / "seq"), sequence_length=2, random_shuffle=True, initial_fill=3,
                                name="R")


def _b_video_reader(name, **extra):
    def build(tmp):
        from sluice.backends.video.barcode import write_barcode_video

        path = tmp / "v.mp4"
        if not path.exists():  # once: the round trip's pipelines must read the same file, not two encodes of it
            write_barcode_video(path, num_frames=16, width=32, height=32)
        reader = fn.experimental.readers.video if name == "experimental" else getattr(fn.readers, name)
        return reader(filenames=[str(path)], sequence_length=2, random_shuffle=True, initial_fill=3, device="cpu",
                      name="R", **extra)
    return build


def _b_readers_webdataset(tmp):
    import tarfile

    shard = tmp / "s.tar"
    with tarfile.open(shard, "w") as tar:
        for i in range(11):
            for ext, data in (("bin", bytes([i]) * (i + 1)), ("cls", str(i).encode())):
                info = tarfile.TarInfo(f"k{i:02d}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return tuple(fn.readers.webdataset(paths=[str(shard)], ext=["bin", "cls"], random_shuffle=True,
                                       initial_fill=4, name="R"))


def _b_readers_numpy(tmp):
    for i in range(11):
        np.save(tmp / f"a{i:02d}.npy", np.arange(i, i + 6, dtype=np.int16).reshape(2, 3))
    return fn.readers.numpy(file_root=str(tmp), roi_start=[1], roi_axes=[0], shuffle_after_epoch=True, name="R")


def _b_readers_tfrecord(tmp):
    import struct

    from sluice import tfrecord
    from sluice.backends.tfrecord import masked_crc
    from sluice.native.io import crc32c

    def field(num, payload):  # protobuf: a length-delimited field (payloads under 128 bytes here)
        return bytes([num << 3 | 2, len(payload)]) + payload

    def crc(data):
        return masked_crc(int(crc32c(np.frombuffer(data, np.uint8), [0], [len(data)])[0]))

    with open(tmp / "r.tfrecord", "wb") as f:
        for i in range(11):
            rec = field(1, field(1, field(1, b"x") + field(2, field(1, field(1, bytes([i]) * (i + 1))))))
            length = struct.pack("<Q", len(rec))
            f.write(length + struct.pack("<I", crc(length)) + rec + struct.pack("<I", crc(rec)))
    return fn.readers.tfrecord(path=[str(tmp / "r.tfrecord")], random_shuffle=True, initial_fill=4, name="R",
                               features={"x": tfrecord.FixedLenFeature((), tfrecord.string, "")})["x"]


def _b_readers_coco(tmp):
    import json

    paths = _write_images(tmp / "coco", 7)
    doc = {"images": [{"id": i, "file_name": f"{i:03d}.jpg", "width": 12, "height": 12} for i in range(7)],
           "annotations": [{"id": i, "image_id": i, "category_id": 1, "bbox": [1, 1, 2 + i, 3]} for i in range(7)],
           "categories": [{"id": 1}]}
    (tmp / "ann.json").write_text(json.dumps(doc))
    assert len(paths) == 7
    return tuple(fn.readers.coco(file_root=str(tmp / "coco"), annotations_file=str(tmp / "ann.json"),
                                 random_shuffle=True, initial_fill=3, image_ids=True, name="R"))


def _b_readers_nemo_asr(tmp):
    import json

    import soundfile

    lines = []
    for i in range(7):
        soundfile.write(tmp / f"{i}.wav", np.full(80 + 10 * i, (i + 1) / 10, np.float32), 8000, subtype="FLOAT")
        lines.append(json.dumps({"audio_filepath": f"{i}.wav", "duration": (80 + 10 * i) / 8000, "text": str(i)}))
    (tmp / "m.json").write_text("\n".join(lines))
    return tuple(fn.readers.nemo_asr(manifest_filepaths=[str(tmp / "m.json")], shuffle_after_epoch=True,
                                     read_idxs=True, name="R"))


def _b_readers_mxnet(tmp):
    import struct

    with open(tmp / "r.rec", "wb") as f, open(tmp / "r.idx", "w") as idx:
        for i in range(11):
            payload = struct.pack("<IfQQ", 0, float(i), i, 0) + bytes([i]) * (i + 1)
            idx.write(f"{i}\t{f.tell()}\n")
            f.write(struct.pack("<II", 0xCED7230A, len(payload)) + payload + b"\0" * (-len(payload) % 4))
    return tuple(fn.readers.mxnet(path=[str(tmp / "r.rec")], index_path=[str(tmp / "r.idx")], random_shuffle=True,
                                  initial_fill=4, name="R"))


def _lmdb(tmp, values):
    import lmdb

    env = lmdb.open(str(tmp / "db"), map_size=1 << 22)
    with env.begin(write=True) as txn:
        for i, v in enumerate(values):
            txn.put(f"{i:04d}".encode(), v)
    env.close()
    return str(tmp / "db")


def _b_readers_caffe(tmp):
    # caffe.Datum: data (field 4, bytes) and label (field 5, varint)
    path = _lmdb(tmp, [bytes([0x22, i + 1]) + bytes([i]) * (i + 1) + bytes([0x28, i]) for i in range(11)])
    return tuple(fn.readers.caffe(path=path, random_shuffle=True, initial_fill=4, name="R"))


def _b_readers_caffe2(tmp):
    def proto(body):  # TensorProtos.protos (field 1)
        return bytes([0x0A, len(body)]) + body

    # an encoded image (data_type 4 STRING, string_data field 6) and an INT32 label (data_type 2, int32_data 4)
    values = [proto(bytes([0x10, 4, 0x32, i + 1]) + bytes([i]) * (i + 1)) + proto(bytes([0x10, 2, 0x20, i]))
              for i in range(11)]
    return tuple(fn.readers.caffe2(path=_lmdb(tmp, values), random_shuffle=True, initial_fill=4, name="R"))


def _b_readers_fits(tmp):
    def hdu(cards, data=b""):
        head = b"".join(c.ljust(80).encode() for c in cards + ["END"])
        return head + b" " * (-len(head) % 2880) + data + b"\0" * (-len(data) % 2880)

    for i in range(7):
        data = np.full(i + 1, i, ">i2").tobytes()
        (tmp / f"{i}.fits").write_bytes(
            hdu(["SIMPLE  =                    T", "BITPIX  =                    8", "NAXIS   =                    0"])
            + hdu(["XTENSION= 'IMAGE   '", "BITPIX  =                   16", "NAXIS   =                    1",
                   f"NAXIS1  = {i + 1:>20}", "PCOUNT  =                    0", "GCOUNT  =                    1"], data))
    return fn.experimental.readers.fits(file_root=str(tmp), random_shuffle=True, initial_fill=3, name="R")


def _masks(tmp):
    masks = [np.random.default_rng(i).integers(0, 3, (8, 9), dtype=np.uint8) for i in range(BATCH)]
    return fn.external_source(source=lambda: masks)


def _b_random_object_bbox(tmp):
    return tuple(fn.segmentation.random_object_bbox(_masks(tmp), foreground_prob=0.8))


def _b_random_mask_pixel(tmp):
    return fn.segmentation.random_mask_pixel(_masks(tmp), foreground=1)


def _b_roi_random_crop(tmp):
    return fn.roi_random_crop(_masks(tmp), crop_shape=[4, 4], roi_start=[1, 1], roi_end=[6, 7])


def _b_random_crop_generator(tmp):
    return tuple(fn.random_crop_generator(fn.external_source(source=lambda: [np.array([60, 80, 3])] * BATCH)))


BUILDERS = {
    "readers.file": _b_readers_file,
    "readers.webdataset": _b_readers_webdataset,
    "readers.numpy": _b_readers_numpy,
    "readers.tfrecord": _b_readers_tfrecord,
    "readers.coco": _b_readers_coco,
    "readers.nemo_asr": _b_readers_nemo_asr,
    "readers.mxnet": _b_readers_mxnet,
    "experimental.readers.fits": _b_readers_fits,
    "readers.caffe": _b_readers_caffe,
    "readers.caffe2": _b_readers_caffe2,
    "segmentation.random_object_bbox": _b_random_object_bbox,
    "segmentation.random_mask_pixel": _b_random_mask_pixel,
    "roi_random_crop": _b_roi_random_crop,
    "random_crop_generator": _b_random_crop_generator,
    "external_source": _b_external_source,
    "random.coin_flip": _b_random_no_input("coin_flip"),
    "random.uniform": _b_random_no_input("uniform"),
    "random.normal": _b_random_no_input("normal"),
    "random.choice": _b_random_choice,
    "decoders.image_random_crop": _b_image_random_crop,
    "random_bbox_crop": _b_random_bbox_crop,
    "random_resized_crop": _b_random_resized_crop,
    "jitter": _b_jitter,
    "readers.sequence": _b_readers_sequence,
    "readers.video": _b_video_reader("video"),
    "readers.video_resize": _b_video_reader("video_resize", resize_x=16, resize_y=16),
    "experimental.readers.video": _b_video_reader("experimental", step=1),
}

STATEFUL = sorted(name for name, schema in REGISTRY.items() if schema.stateful)


def _pipe(build, tmp, checkpoint=None, exec_async=True, seed=77):
    pipe = Pipeline(batch_size=BATCH, num_threads=2, device_id=None, seed=seed, enable_checkpointing=True,
                    checkpoint=checkpoint, exec_async=exec_async)
    with pipe:
        outs = build(tmp)
    pipe.set_outputs(*(outs if isinstance(outs, (list, tuple)) else [outs]))
    return pipe


def _snapshot(outputs):
    return [[s.clone() for s in batch.samples] for batch in outputs]


def _assert_same(a, b, where):
    assert len(a) == len(b), where
    for i, (ba, bb) in enumerate(zip(a, b)):
        assert len(ba) == len(bb), (where, i)
        for sa, sb in zip(ba, bb):
            assert sa.shape == sb.shape and torch.equal(sa, sb), (where, i)


@pytest.mark.parametrize("op", STATEFUL)
@pytest.mark.parametrize("exec_async", [True, False])
def test_round_trip_every_stateful_operator(op, exec_async, tmp_path):
    if op not in BUILDERS:
        pytest.skip(f"no checkpoint builder for the stateful operator {op}: add one to tests/test_checkpoint.py")
    try:
        build = BUILDERS[op]
        first = _pipe(build, tmp_path, exec_async=exec_async)
        k, more = 4, 5
        for _ in range(k):
            first.run()
    except ImportError as e:
        pytest.skip(f"{op} needs {e.name}")
    ckpt = first.checkpoint()
    expected = [_snapshot(first.run()) for _ in range(more)]
    first.close()
    resumed = _pipe(build, tmp_path, checkpoint=ckpt, exec_async=exec_async)
    got = [_snapshot(resumed.run()) for _ in range(more)]
    resumed.close()
    for i, (e, g) in enumerate(zip(expected, got)):
        _assert_same(e, g, f"{op}, iteration {k + i}")
    # And the run after the checkpoint differs from the start of the data (the test can fail).
    fresh = _pipe(build, tmp_path, exec_async=exec_async)
    start = [_snapshot(fresh.run()) for _ in range(more)]
    fresh.close()
    if op != "external_source":
        assert any(not all(torch.equal(x, y) for bx, by in zip(e, s) for x, y in zip(bx, by))
                   for e, s in zip(expected, start) if [len(b) for b in e] == [len(b) for b in s]) or \
            any(tuple(x.shape) != tuple(y.shape) for e, s in zip(expected, start) for bx, by in zip(e, s)
                for x, y in zip(bx, by))


def test_checkpoint_restores_unnamed_readers(tmp_path):
    def build(tmp):
        files = [tmp / f"{i}.bin" for i in range(5)]
        for i, f in enumerate(files):
            f.write_bytes(bytes([i]))
        return fn.readers.file(files=[str(f) for f in files])[0]

    first = _pipe(build, tmp_path)
    first.run()
    ckpt = first.checkpoint()
    expected = _snapshot(first.run())
    resumed = _pipe(build, tmp_path, checkpoint=ckpt)
    _assert_same(expected, _snapshot(resumed.run()), "unnamed reader")


def test_checkpoint_carries_generator_state(tmp_path):
    """Restoring into a pipeline made with another seed still continues the checkpointed run."""
    first = _pipe(_b_random_no_input("uniform"), tmp_path)
    first.run()
    ckpt = first.checkpoint()
    expected = _snapshot(first.run())
    resumed = _pipe(_b_random_no_input("uniform"), tmp_path, checkpoint=ckpt, seed=1)
    _assert_same(expected, _snapshot(resumed.run()), "other seed")


def test_checkpoint_to_file_and_back(tmp_path):
    pipe = _pipe(_b_readers_file, tmp_path)
    for _ in range(2):
        pipe.run()
    path = tmp_path / "ckpt.bin"
    data = pipe.checkpoint(path)
    assert path.read_bytes() == data
    expected = _snapshot(pipe.run())
    resumed = _pipe(_b_readers_file, tmp_path, checkpoint=str(path))
    _assert_same(expected, _snapshot(resumed.run()), "from file")


def test_checkpoint_needs_enable_checkpointing():
    pipe = Pipeline(batch_size=2, device_id=None)
    with pipe:
        out = fn.random.uniform()
    pipe.set_outputs(out)
    with pytest.raises(PipelineError, match="enable_checkpointing"):
        pipe.checkpoint()


def _reader_pipe(files, checkpoint=None, shuffle=True):
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None, seed=5, enable_checkpointing=True,
                    checkpoint=checkpoint)
    with pipe:
        data, label = fn.readers.file(files=files, shuffle_after_epoch=shuffle, pad_last_batch=True,
                                      name="Reader")
        noise = fn.random.uniform(shape=[1])
    pipe.set_outputs(data, label, noise)
    return pipe


@pytest.fixture
def seven(tmp_path):
    files = []
    for i in range(1, 8):
        p = tmp_path / f"{i}.bin"
        p.write_bytes(bytes([i]))
        files.append(str(p))
    return files


def _flat(batch):
    return [(tuple(d["data"].flatten().tolist()), tuple(d["noise"].flatten().tolist())) for d in batch]


@pytest.mark.parametrize("policy", [LastBatchPolicy.PARTIAL, LastBatchPolicy.FILL, LastBatchPolicy.DROP])
@pytest.mark.parametrize("stop_after", [1, 3, 4, 6])
def test_iterator_resume_mid_epoch(seven, policy, stop_after):
    """A run stopped after k batches (mid-epoch or at an epoch's end) and resumed from state_dict() yields
    exactly the batches of the uninterrupted run, across epoch boundaries and shuffles."""
    names = ["data", "label", "noise"]

    def make(ckpt=None):
        return DALIGenericIterator(_reader_pipe(seven), names, reader_name="Reader", last_batch_policy=policy,
                                   auto_reset=True)

    def take(it, n):
        out = []
        while len(out) < n:
            try:
                out.append(_flat(next(it)))
            except StopIteration:
                out.append("epoch end")
        return out

    total = 12
    reference = take(make(), total)
    it = make()
    head = take(it, stop_after)
    state = it.state_dict()
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    resumed = make()
    resumed.load_state_dict(torch.load(buf, weights_only=False))
    tail = take(resumed, total - stop_after)
    assert head + tail == reference
    # Loading into the same (already running) iterator works too.
    it.load_state_dict(state)
    assert take(it, 2) == reference[stop_after:stop_after + 2]
