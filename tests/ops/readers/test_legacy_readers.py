"""fn.readers.mxnet, fn.readers.caffe and fn.readers.caffe2 on small databases the tests write from the formats'
specifications (tests/ops/readers/_legacy_data.py): every record comes back once per epoch with its label, in
file order without shuffling, across shards, with pad_last_batch; records split into RecordIO parts are joined;
damaged data is an error naming the record."""

import numpy as np
import pytest
import torch
from _legacy_data import (BYTE, FLOAT, INT32, INT64, STRING, datum, rec_payload, tensor_proto, tensor_protos,
                          write_lmdb, write_rec)

from sluice import fn

MAGIC_BYTES = (0xCED7230A).to_bytes(4, "little")


def _images(n):
    rng = np.random.default_rng(4)
    out = []
    for i in range(n):
        body = bytes(rng.integers(0, 256, 13 + 5 * i, dtype=np.uint8))
        if i % 3 == 1:  # a payload holding the magic at an aligned position: written in parts
            body = b"\xff" * 4 + MAGIC_BYTES + body + MAGIC_BYTES + b"xyz"
        out.append(body)
    return out


def _epoch(build, batch, n_batches, **kw):
    from sluice.pipeline.pipeline import Pipeline

    pipe = Pipeline(batch_size=batch, num_threads=2, device_id=None, seed=3, **kw)
    with pipe:
        outs = build()
    pipe.set_outputs(*(outs if isinstance(outs, (list, tuple)) else [outs]))
    got = [pipe.run() for _ in range(n_batches)]
    pipe.close()
    return got


def test_mxnet_reader_every_record_with_its_labels(tmp_path):
    images = _images(7)
    labels = [float(i) if i % 2 else [i, 0.5, -1.0] for i in range(7)]
    payloads = [rec_payload(im, lab) for im, lab in zip(images, labels)]
    write_rec(tmp_path / "a.rec", tmp_path / "a.idx", payloads[:4])
    write_rec(tmp_path / "b.rec", tmp_path / "b.idx", payloads[4:])
    paths = [str(tmp_path / "a.rec"), str(tmp_path / "b.rec")]
    idx = [str(tmp_path / "a.idx"), str(tmp_path / "b.idx")]
    (data, lab), = _epoch(lambda: fn.readers.mxnet(path=paths, index_path=idx), 7, 1)
    for i in range(7):
        assert bytes(data[i].numpy()) == images[i]
        np.testing.assert_array_equal(lab[i].numpy(), np.atleast_1d(np.float32(labels[i])))
        assert lab[i].dtype == torch.float32
    assert "b.rec:record 1" in data.source_info[5]


def test_mxnet_reader_shards_and_pads(tmp_path):
    images = _images(5)
    write_rec(tmp_path / "a.rec", tmp_path / "a.idx", [rec_payload(im, i) for i, im in enumerate(images)])
    kw = dict(path=[str(tmp_path / "a.rec")], index_path=[str(tmp_path / "a.idx")], num_shards=2,
              pad_last_batch=True)
    seen = []
    for shard in (0, 1):
        batches = _epoch(lambda: fn.readers.mxnet(shard_id=shard, **kw), 2, 2)
        for _, lab in batches:
            seen += [int(x) for x in lab.as_tensor().reshape(-1).tolist()]
    assert sorted(set(seen)) == [0, 1, 2, 3, 4] and len(seen) == 8  # shard 1: 2 records, padded with its last


def test_mxnet_reader_damaged_record_is_named(tmp_path):
    write_rec(tmp_path / "a.rec", tmp_path / "a.idx", [rec_payload(b"abcd", 1), rec_payload(b"efgh", 2)])
    raw = bytearray((tmp_path / "a.rec").read_bytes())
    raw[-40] ^= 0xFF  # inside the second record's frame header
    raw[len(raw) // 2 + 2] ^= 0xFF
    (tmp_path / "a.rec").write_bytes(bytes(raw))
    with pytest.raises(Exception, match=r"a\.rec:record 1"):
        _epoch(lambda: fn.readers.mxnet(path=[str(tmp_path / "a.rec")], index_path=[str(tmp_path / "a.idx")]),
               2, 1)


def test_caffe_reader_encoded_raw_and_labels(tmp_path):
    pytest.importorskip("lmdb")
    rng = np.random.default_rng(9)
    raw = rng.integers(0, 256, (4, 5, 3), dtype=np.uint8)
    values = [datum(b"JPEGBYTES-0", 3), datum(raw.tobytes(), 7, shape=(4, 5, 3), encoded=False),
              datum(b"JPEG-2", 1, encoded=True)]
    write_lmdb(tmp_path / "db", values)
    (img, lab), = _epoch(lambda: fn.readers.caffe(path=str(tmp_path / "db")), 3, 1)
    assert bytes(img[0].numpy()) == b"JPEGBYTES-0" and bytes(img[2].numpy()) == b"JPEG-2"
    np.testing.assert_array_equal(img[1].numpy(), raw)
    assert lab.as_tensor().reshape(-1).tolist() == [3, 7, 1] and lab.dtype == torch.int32
    (only_labels,), = _epoch(lambda: fn.readers.caffe(path=str(tmp_path / "db"), image_available=False), 3, 1)
    assert only_labels.as_tensor().reshape(-1).tolist() == [3, 7, 1]


def test_caffe2_reader_label_types_additional_inputs_and_bbox(tmp_path):
    pytest.importorskip("lmdb")
    raw = np.arange(2 * 3 * 1, dtype=np.uint8).reshape(2, 3, 1)
    values = [
        tensor_protos(tensor_proto(STRING, b"IMG0"), tensor_proto(INT32, [4]),
                      tensor_proto(FLOAT, [0.5, 1.5]), tensor_proto(INT32, [1, 2, 3, 4])),
        tensor_protos(tensor_proto(BYTE, raw.tobytes(), dims=[2, 3, 1]), tensor_proto(INT32, [9], packed=False),
                      tensor_proto(FLOAT, [2.5, 3.5], packed=False), tensor_proto(INT32, [5, 6, 7, 8])),
    ]
    write_lmdb(tmp_path / "db", values)
    (img, lab, extra, bbox), = _epoch(lambda: fn.readers.caffe2(path=str(tmp_path / "db"), additional_inputs=1,
                                                                bbox=True), 2, 1)
    assert bytes(img[0].numpy()) == b"IMG0"
    np.testing.assert_array_equal(img[1].numpy(), raw)
    assert lab.as_tensor().reshape(-1).tolist() == [4, 9]
    np.testing.assert_array_equal(extra[1].numpy(), [2.5, 3.5])
    assert bbox[0].tolist() == [1, 2, 3, 4] and bbox[1].tolist() == [5, 6, 7, 8]
    sparse = [tensor_protos(tensor_proto(STRING, b"x"), tensor_proto(INT32, [0, 3])),
              tensor_protos(tensor_proto(STRING, b"y"), tensor_proto(INT32, [2]))]
    write_lmdb(tmp_path / "sparse", sparse)
    (_, multi), = _epoch(lambda: fn.readers.caffe2(path=str(tmp_path / "sparse"), label_type=1, num_labels=4), 2, 1)
    assert multi.as_tensor().tolist() == [[1, 0, 0, 1], [0, 0, 1, 0]]
    dense = [tensor_protos(tensor_proto(STRING, b"x"), tensor_proto(FLOAT, [0.1, 0.2, 0.3]))]
    write_lmdb(tmp_path / "dense", dense)
    (_, d), = _epoch(lambda: fn.readers.caffe2(path=str(tmp_path / "dense"), label_type=2, num_labels=3), 1, 1)
    np.testing.assert_allclose(d[0].numpy(), [0.1, 0.2, 0.3], rtol=1e-6)
    int64s = [tensor_protos(tensor_proto(STRING, b"x"), tensor_proto(INT32, [1]), tensor_proto(INT64, [-5, 1 << 40]))]
    write_lmdb(tmp_path / "i64", int64s)
    (_, _, big), = _epoch(lambda: fn.readers.caffe2(path=str(tmp_path / "i64"), additional_inputs=1), 1, 1)
    assert big[0].tolist() == [-5, 1 << 40] and big.dtype == torch.int64


def test_lmdb_readers_shuffle_shard_and_name_bad_records(tmp_path):
    pytest.importorskip("lmdb")
    write_lmdb(tmp_path / "db", [datum(bytes([i]) * 3, i) for i in range(9)])
    seen = []
    for shard in range(3):
        for _, lab in _epoch(lambda: fn.readers.caffe(path=str(tmp_path / "db"), num_shards=3, shard_id=shard,
                                                      random_shuffle=True, initial_fill=4), 3, 1):
            seen += lab.as_tensor().reshape(-1).tolist()
    assert sorted(seen) == list(range(9))
    write_lmdb(tmp_path / "bad", [datum(b"ok", 1), b"\x22\xff\x01"])
    with pytest.raises(Exception, match="record 1"):
        _epoch(lambda: fn.readers.caffe(path=str(tmp_path / "bad")), 2, 1)
    with pytest.raises(Exception, match="not an LMDB database|No such file"):
        _epoch(lambda: fn.readers.caffe(path=str(tmp_path / "missing")), 1, 1)
