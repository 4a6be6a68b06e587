"""fn.readers.sequence: folders of barcode PNG frames read as videos; compared with Pillow's decode."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from sluice import fn, pipeline_def
from sluice.backends.video.barcode import make_frame, read_barcode


@pytest.fixture
def streams(tmp_path):
    for s, count in (("a", 10), ("b", 7)):
        (tmp_path / s).mkdir()
        for i in range(count):
            Image.fromarray(make_frame(100 * (s == "b") + i, 64, 48)).save(tmp_path / s / f"{i:04d}.png")
    (tmp_path / "notes.txt").write_text("not a stream")
    return tmp_path


def run(batch_size, **kwargs):
    @pipeline_def(batch_size=batch_size, num_threads=2, device_id=None, seed=1)
    def pipe():
        return fn.readers.sequence(name="Reader", **kwargs)

    p = pipe()
    return p, p.run()[0]


def test_sequences_exact(streams):
    p, out = run(4, file_root=str(streams), sequence_length=3, step=3, stride=2)
    # stream a (10 frames): starts 0, 3 (span 4 -> start <= 5); stream b (7 frames): starts 0 (start <= 2)
    assert out.layout() == "FHWC" and out[0].shape == (3, 48, 64, 3)
    got = [[read_barcode(f) for f in out[i]] for i in range(4)]
    assert got[:3] == [[0, 2, 4], [3, 5, 7], [100, 102, 104]]
    ref = np.asarray(Image.open(streams / "a" / "0002.png").convert("RGB"))
    assert np.array_equal(out[0][1].numpy(), ref)  # PNG is lossless: exactly Pillow's pixels
    assert p.reader_meta("Reader")["epoch_size"] == 3


def test_errors(streams, tmp_path):
    with pytest.raises(Exception, match="has 21 frames"):
        run(1, file_root=str(streams), sequence_length=11, stride=2)
    (streams / "a" / "0005.png").write_bytes(b"")
    with pytest.raises(Exception, match=r"0005.png' is empty"):
        run(2, file_root=str(streams), sequence_length=10)
    with pytest.raises(Exception, match="does not exist"):
        run(1, file_root=str(tmp_path / "missing"), sequence_length=2)
