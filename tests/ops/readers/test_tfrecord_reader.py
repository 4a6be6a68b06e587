"""fn.readers.tfrecord on TFRecord files written by this test's own small writer (its own protobuf encoding and
CRC-32C, independent of the reader's): features of every type, indexes (DALI's format, built, cached, given),
`sluice tfrecord-index`, and damaged files named in errors."""

import numpy as np
import pytest
import torch
from _reader_data import example, write_tfrecord

import sluice
from sluice import fn
from sluice import tfrecord as tfrec
from sluice.cli import main as cli_main
from sluice.errors import PipelineError


# ---- tests ---------------------------------------------------------------------------------------------------------
def make_files(tmp_path, files=2, per_file=5):
    paths, truth = [], []
    for k in range(files):
        records = []
        for i in range(per_file):
            n = k * per_file + i
            feats = {"image/encoded": bytes([n]) * (n + 3), "label": [n], "box!": [n, -n - 1],
                     "xs": [float(x) / 2 for x in range(n % 3 + 1)]}
            if n == 3:
                del feats["label"]
            truth.append(feats)
            records.append(example(feats))
        p = tmp_path / f"train-{k}.tfrecord"
        write_tfrecord(p, records)
        paths.append(str(p))
    return paths, truth


FEATURES = {
    "image/encoded": tfrec.FixedLenFeature((), tfrec.string, ""),
    "label": tfrec.FixedLenFeature([1], tfrec.int64, -1),
    "box": tfrec.FixedLenFeature([2], tfrec.int64),
    "xs": tfrec.VarLenFeature(tfrec.float32, 0.0),
}


def read(batch_size, **kw):
    @sluice.pipeline_def(batch_size=batch_size, num_threads=2, device_id=None, seed=2)
    def pipe():
        out = fn.readers.tfrecord(name="R", **kw)
        assert isinstance(out, dict) and list(out) == list(kw["features"])
        return tuple(out.values())

    return pipe().run()


def test_features_of_every_type(tmp_path):
    paths, truth = make_files(tmp_path)
    encoded, label, box, xs = read(10, path=paths, features=FEATURES)
    assert encoded.packed is not None
    assert [bytes(s.numpy()) for s in encoded] == [t["image/encoded"] for t in truth]
    assert label.as_tensor().flatten().tolist() == [t.get("label", [-1])[0] for t in truth]
    assert label.dtype == torch.int64 and box.as_tensor().tolist() == [t["box!"] for t in truth]
    assert [s.tolist() for s in xs] == [t["xs"] for t in truth] and xs.dtype == torch.float32
    assert encoded.source_info[7] == f"{paths[1]}:record 2"


def test_index_given_built_and_cli(tmp_path, capsys):
    paths, truth = make_files(tmp_path, files=1, per_file=4)
    assert cli_main(["tfrecord-index", paths[0], str(tmp_path / "a.idx")]) == 0
    lines = (tmp_path / "a.idx").read_text().split()
    sizes = [int(x) for x in lines[1::2]]
    assert [int(x) for x in lines[::2]] == list(np.cumsum([0] + sizes[:-1]))
    got = read(4, path=paths, index_path=[str(tmp_path / "a.idx")], features={"label": FEATURES["label"]})
    assert got[0].as_tensor().flatten().tolist() == [0, 1, 2, -1]


@pytest.mark.parametrize("damage, message", [
    (lambda d: d[:-3], "truncated: record 3 at byte"),
    (lambda d: d[:20] + bytes([d[20] ^ 1]) + d[21:], "record 0 is damaged: its length or data fails its CRC"),
    (lambda d: d[:8] + b"\0\0\0\0" + d[12:], "the length of record 0 .* fails its CRC"),
])
def test_damaged_files_are_named(tmp_path, damage, message):
    paths, _ = make_files(tmp_path, files=1, per_file=4)
    data = open(paths[0], "rb").read()
    open(paths[0], "wb").write(damage(data))
    with pytest.raises((ValueError, PipelineError), match=message) as e:
        read(4, path=paths, features=FEATURES)
    assert "train-0.tfrecord" in str(e.value)


def test_broken_index_and_bad_records(tmp_path):
    paths, _ = make_files(tmp_path, files=1, per_file=2)
    (tmp_path / "bad.idx").write_text("0 40\nzero 12\n")
    with pytest.raises(ValueError, match="bad.idx' .*is broken: line 2 should be 'offset size'"):
        read(2, path=paths, index_path=[str(tmp_path / "bad.idx")], features=FEATURES)
    (tmp_path / "bad.idx").write_text("0 40\n40 100000\n")
    with pytest.raises(ValueError, match="record 1 lies at bytes 40..100040, past the end of the file"):
        read(2, path=paths, index_path=[str(tmp_path / "bad.idx")], features=FEATURES)
    write_tfrecord(tmp_path / "junk.tfrecord", [b"\x0f\xff\xff", example({"label": [1]})])
    with pytest.raises(PipelineError, match="junk.tfrecord:record 0 is not a tf.train.Example"):
        read(2, path=[str(tmp_path / "junk.tfrecord")], features={"label": FEATURES["label"]})
    write_tfrecord(tmp_path / "nobox.tfrecord", [example({"label": [1]})])
    with pytest.raises(PipelineError, match="record 0 has no feature 'box' and its FixedLenFeature has no default"):
        read(1, path=[str(tmp_path / "nobox.tfrecord")], features={"box": FEATURES["box"]})
    write_tfrecord(tmp_path / "three.tfrecord", [example({"box": [1, 2, 3]})])
    with pytest.raises(PipelineError, match=r"feature 'box' of .*record 0 has 3 values; its FixedLenFeature\[2\] "
                                            "needs 2"):
        read(1, path=[str(tmp_path / "three.tfrecord")], features={"box": FEATURES["box"]})


def test_dali_spelling_through_compat(tmp_path):
    from sluice.compat.dali import fn as dfn
    from sluice.compat.dali import ops as dops
    from sluice.compat.dali import tfrecord as dtfrec

    paths, truth = make_files(tmp_path, files=1, per_file=3)
    features = {"label": dtfrec.FixedLenFeature([1], dtfrec.int64, -1)}

    @sluice.pipeline_def(batch_size=3, num_threads=1, device_id=None)
    def pipe():
        a = dfn.readers.tfrecord(path=paths, index_path=[], features=features)["label"]
        with pytest.warns(DeprecationWarning, match="ops.TFRecordReader is deprecated; use ops.readers.TFRecord"):
            b = dops.TFRecordReader(path=paths, features=features)()["label"]
        return a, b

    a, b = pipe().run()
    assert a.as_tensor().flatten().tolist() == b.as_tensor().flatten().tolist() == [0, 1, 2]
