"""The barcoded test videos: written again with the same arguments, a video is the same file, byte for byte (a
test that writes its video once per pipeline, as the checkpoint round trip did, compares the same frames)."""

from __future__ import annotations

import hashlib
import random

from sluice.backends.video import barcode
from sluice.backends.video.barcode import read_barcodes, write_barcode_video


def test_write_barcode_video_is_reproducible(tmp_path):
    """Twenty encodes of the same frames give one file, also with leftovers of earlier allocations in the C heap.

    On AVX-512 CPUs, libx264 let stale heap contents change a small video's bitstream: in a plain loop 1 to 12
    encodes in 100 differed, after freeing blocks of non-zero bytes as below about 60 (this test then failed in 20
    runs of 20)."""
    path = tmp_path / "v.mp4"
    rng = random.Random(0)
    digests = set()
    for _ in range(20):
        junk = [bytes([rng.randrange(1, 256)]) * rng.randrange(1 << 10, 1 << 17) for _ in range(64)]
        del junk  # freed blocks of non-zero bytes, which the encoder's allocations may be given
        write_barcode_video(path, num_frames=16, width=32, height=32)
        digests.add(hashlib.sha256(path.read_bytes()).hexdigest())
    assert len(digests) == 1, f"20 encodes of the same frames made {len(digests)} different files"
    import av

    with av.open(str(path)) as c:
        assert read_barcodes([f.to_ndarray(format="rgb24") for f in c.decode(video=0)]) == list(range(16))


def test_x264_reproducible_keeps_the_callers_params(monkeypatch):
    """On an AVX-512 CPU ``asm=avx2`` joins the caller's x264-params, unless the caller names asm; elsewhere
    nothing changes."""
    monkeypatch.setattr(barcode, "_cpu_has_avx512", lambda: True)
    for given, want in [({}, "asm=avx2"), ({"x264-params": "keyint=5"}, "keyint=5:asm=avx2"),
                        ({"x264-params": "keyint=5:asm=0"}, "keyint=5:asm=0")]:
        opts = dict(given)
        barcode._x264_reproducible(opts)
        assert opts["x264-params"] == want, given
    monkeypatch.setattr(barcode, "_cpu_has_avx512", lambda: False)
    opts = {"g": "12"}
    barcode._x264_reproducible(opts)
    assert opts == {"g": "12"}
