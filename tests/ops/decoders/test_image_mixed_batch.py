"""The mixed decoders' batch lane on a batch of mixed files (baseline, grey, progressive, CMYK, PNG, EXIF-rotated,
16-bit): the GPU's JPEGs in one batched call, the rest on the CPU threads at the same time, into one buffer. Each
sample must equal what the general path (``GpuImageDecoder.decode``) gives it: the same decoder per kind of file,
the same window from the same seed. Run on the CPU: torch.cuda is replaced by no-ops and the batched GPU decoder by
libjpeg-turbo (the ``fake_gpu`` fixture of conftest.py), in both paths."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from image_fixtures import cmyk_jpeg, corrupt_jpeg, encode, pattern, run_decoder, with_orientation
from sluice import types
from sluice.backends.image.batch_plan import plan_batch
from sluice.backends.image.gpu import GpuImageDecoder
from sluice.errors import SampleError


def _mixed() -> tuple[list[bytes], dict[str, int]]:
    """A batch of every kind of file, and how many of them each route should take."""
    img = pattern(48, 64, seed=1)
    tall = pattern(70, 40, seed=2)
    grey16 = (pattern(30, 44, c=1, seed=3, dtype=np.uint16))
    samples = [
        encode(img, "JPEG", quality=90, subsampling=2),                       # gpu
        encode(tall, "JPEG", quality=80, subsampling=0),                      # gpu (4:4:4)
        encode(img[:, :, :1], "JPEG", quality=85),                            # gpu (grey)
        encode(img, "JPEG", quality=90, progressive=True),                    # core
        encode(tall[:, :, :1], "JPEG", quality=90, progressive=True),         # core (grey)
        cmyk_jpeg(img),                                                       # codec (Pillow)
        encode(tall, "PNG"),                                                  # codec (OpenCV)
        encode(np.dstack([img, img[:, :, :1]]), "PNG"),                       # codec (RGBA PNG)
        encode(grey16, "PNG"),                                                # codec (16-bit)
        with_orientation(tall, 6, quality=90),                                # gpu, turned after decoding
        with_orientation(img, 3, quality=90, progressive=True),               # codec (rotated progressive)
        with_orientation(img, 1, quality=90),                                 # gpu (Exif, upright)
        encode(pattern(33, 57, seed=4), "JPEG", quality=75),                  # gpu
    ]
    return samples, {"gpu": 6, "cpu_core": 2, "cpu_codec": 5}


@pytest.fixture
def lane(fake_gpu, monkeypatch):
    """The batch lane on the CPU: its GPU call decoded by the stand-in, every started batch's split recorded."""
    splits = []
    start = GpuImageDecoder.start_batch

    def spy(self, plan, *a, **k):
        started = start(self, plan, *a, **k)
        splits.append(dict(self.last_split))
        return started

    def chw(self, parts, gray):
        mode = fake_gpu["ImageReadMode"]
        return fake_gpu["decode_jpeg"](list(parts), mode.GRAY if gray else mode.RGB, self.device)

    monkeypatch.setattr(GpuImageDecoder, "start_batch", spy)
    monkeypatch.setattr(GpuImageDecoder, "_decode_gpu_chw", chw)
    monkeypatch.setattr(GpuImageDecoder, "takes_whole_jpeg_batches", property(lambda self: True))
    fake_gpu["splits"] = splits
    return fake_gpu


def _general(monkeypatch, op, samples, **kw):
    """The same batch through the general path (the lane refused)."""
    with monkeypatch.context() as m:
        m.setattr(GpuImageDecoder, "takes_whole_jpeg_batches", property(lambda self: False))
        return run_decoder(op, samples, device="mixed", ctx_device=torch.device("cpu"), packed=True, **kw)


def _lane(op, samples, **kw):
    return run_decoder(op, samples, device="mixed", ctx_device=torch.device("cpu"), packed=True, **kw)


@pytest.mark.parametrize("op,kw", [
    ("decoders.image", {}),
    ("decoders.image_random_crop", {"random_area": [0.3, 1.0], "seed": 7}),
    ("decoders.image_random_crop", {"random_area": [0.1, 0.5], "random_aspect_ratio": [0.5, 2.0], "seed": 3,
                                    "output_type": types.GRAY}),
    ("decoders.image", {"output_type": types.GRAY}),
    ("decoders.image_slice", {"extra": "anchor_shape"}),   # random_bbox_crop's windows (SSD), ragged
    ("decoders.image_slice", {"rel_start": [0.25, 0.1], "rel_end": [0.9, 0.8], "output_type": types.GRAY}),
])
def test_a_mixed_batch_keeps_the_lane_and_equals_the_general_path(lane, monkeypatch, op, kw):
    samples, routes = _mixed()
    sources = [f"/d/{i}.JPEG" for i in range(len(samples))]
    if kw.get("extra") == "anchor_shape":  # normalised (x, y) anchors and (w, h) shapes, one window a sample
        rng = np.random.default_rng(5)
        anchors = rng.uniform(0, 0.5, (len(samples), 2)).astype(np.float32)
        kw = {**kw, "extra": [list(anchors), list(rng.uniform(0.2, 0.5, (len(samples), 2)).astype(np.float32))]}
    got = _lane(op, samples, sources=sources, iteration=3, **kw)
    assert lane["splits"] == [routes]  # the lane took the batch, each sample on its route
    assert lane["batches"] == [routes["gpu"]]  # one batched GPU call for the GPU's JPEGs
    assert got.packed is not None  # one buffer, samples back to back in order
    want = _general(monkeypatch, op, samples, sources=sources, iteration=3, **kw)
    assert lane["splits"] == [routes]  # (the general path does not start a lane batch)
    for i in range(len(samples)):
        assert got[i].shape == want[i].shape and got[i].dtype == want[i].dtype == torch.uint8, i
        assert torch.equal(got[i], want[i]), i


def test_float_outputs_are_converted_as_one_buffer(lane, monkeypatch):
    samples = _mixed()[0]
    del samples[8]  # no 16-bit source here (see the next test)
    kw = {"dtype": types.FLOAT, "random_area": [0.3, 1.0]}
    got = _lane("decoders.image_random_crop", samples, **kw)
    assert len(lane["splits"]) == 1 and got.packed is not None
    want = _general(monkeypatch, "decoders.image_random_crop", samples, **kw)
    for i in range(len(samples)):
        assert got[i].dtype == torch.float32 and torch.equal(got[i], want[i])


def test_a_16_bit_source_with_a_deeper_output_takes_the_general_path(lane, monkeypatch):
    samples = _mixed()[0]
    got = _lane("decoders.image", samples, dtype=types.UINT16)
    assert lane["splits"] == []
    assert got[8].dtype == torch.uint16 and int(got[8].to(torch.int32).max()) > 255  # all 16 bits kept


def test_routes_come_from_the_headers(lane):
    samples, routes = _mixed()
    sizes = np.array([len(s) for s in samples], np.int64)
    region = torch.frombuffer(bytearray(b"".join(samples)), dtype=torch.uint8)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    plan = plan_batch(region, offsets, sizes, [""] * len(samples), output_type="RGB", adjust_orientation=True)
    assert plan.counts() == routes
    assert plan.orientation.tolist()[9:11] == [6, 3] and tuple(plan.upright[9]) == (40, 70)
    # probed one by one: the files the core cannot read and the JPEGs with an Exif block, nothing else
    assert [i for i, info in enumerate(plan.infos) if info is not None] == [6, 7, 8, 9, 10, 11]
    plain = plan_batch(region, offsets, sizes, [""] * len(samples), output_type="RGB", adjust_orientation=False,
                       core_decodes=False)
    assert plain.counts() == {"gpu": 6, "cpu_core": 0, "cpu_codec": 7} and (plain.orientation == 1).all()


@pytest.mark.parametrize("bad,reason", [
    (lambda good: corrupt_jpeg(good), "corrupt"),           # the scan check sends it to the strict CPU decoder
    (lambda good: good[: len(good) // 2], "truncated"),     # no EOI: the CPU decoder names the cut
    (lambda good: b"\x01" * 100, "unknown image format"),   # the probe names it while routing
    (lambda good: b"", "empty"),
])
def test_a_bad_file_in_a_mixed_batch_is_named(lane, bad, reason):
    samples = _mixed()[0]
    samples[4] = bad(samples[0])
    sources = [f"/d/{i}.JPEG" for i in range(len(samples))]
    with pytest.raises(SampleError) as err:
        _lane("decoders.image_random_crop", samples, sources=sources)
    assert err.value.index == 4 and err.value.source == "/d/4.JPEG"
    assert reason in str(err.value) and "/d/4.JPEG" in str(err.value)


def test_an_image_above_the_pixel_limit_is_named(lane):
    from sluice.backends.image import get_max_image_pixels, set_max_image_pixels

    samples = _mixed()[0]
    samples[1] = encode(pattern(80, 60), "JPEG")
    old = get_max_image_pixels()
    set_max_image_pixels(3999)  # the other samples are smaller
    try:
        with pytest.raises(SampleError, match=r"'/x/1.jpg'.*4800 pixels, above the limit of 3999") as err:
            _lane("decoders.image", samples, sources=[f"/x/{i}.jpg" for i in range(len(samples))])
        assert err.value.index == 1
    finally:
        set_max_image_pixels(old)


def test_the_cpu_share_and_core_failures_keep_the_pixels(lane, monkeypatch):
    """With a CPU share, the last upright GPU JPEGs go to the core too; a JPEG the core fails on is decoded again
    by the codec. The pixels stay those of the general path."""
    from sluice.native import jpeg as native_jpeg

    samples = _mixed()[0] * 2
    monkeypatch.setattr("sluice.backends.image.gpu.DEFAULT_CPU_LOAD", 0.5)
    kw = {"random_area": [0.3, 1.0], "threads": 4}
    got = _lane("decoders.image_random_crop", samples, **kw)
    assert lane["splits"][-1] == {"gpu": 7, "cpu_core": 9, "cpu_codec": 10}  # 5 of the 10 upright GPU JPEGs
    decode = native_jpeg.decode

    def refuses_one(data, windows, colorspace, fast, out, offsets, status, counter=None):
        failed = decode(data, windows, colorspace, fast, out, offsets, status, counter)
        if status[0] == native_jpeg.OK and counter is not None and int(counter[0]) >= len(data):
            # as if the core had failed on the batch's first core sample: nothing of it written
            _, _, h, w = windows[0]
            out[offsets[0]: offsets[0] + h * w * 3] = 0
            status[0] = native_jpeg.ERROR
            failed.append((0, "stand-in failure"))
        return failed

    monkeypatch.setattr(native_jpeg, "decode", refuses_one)
    again = _lane("decoders.image_random_crop", samples, **kw)
    monkeypatch.setattr("sluice.backends.image.gpu.DEFAULT_CPU_LOAD", 0.0)
    want = _general(monkeypatch, "decoders.image_random_crop", samples, **kw)
    for i in range(len(samples)):
        assert torch.equal(got[i], want[i]) and torch.equal(again[i], want[i]), i


def test_batches_of_one_kind(lane, monkeypatch):
    jpegs = [encode(pattern(30 + i, 40, seed=i), "JPEG", quality=90) for i in range(5)]
    pngs = [encode(pattern(30 + i, 40, seed=i), "PNG") for i in range(3)]
    for samples, split in ((jpegs, {"gpu": 5, "cpu_core": 0, "cpu_codec": 0}),
                           (pngs, {"gpu": 0, "cpu_core": 0, "cpu_codec": 3})):
        lane["splits"].clear()
        got = _lane("decoders.image_random_crop", samples)
        assert lane["splits"] == [split]
        want = _general(monkeypatch, "decoders.image_random_crop", samples)
        assert all(torch.equal(got[i], want[i]) for i in range(len(samples)))


def test_the_decoder_counts_the_samples_of_each_path(lane):
    from sluice.pipeline.batch import Batch

    samples, routes = _mixed()
    sizes = np.array([len(s) for s in samples], np.int64)
    region = torch.frombuffer(bytearray(b"".join(samples)), dtype=torch.uint8)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    dec = GpuImageDecoder(torch.device("cpu"), cpu_load=0.0, adaptive=False)
    plan = plan_batch(region, offsets, sizes, [""] * len(samples), output_type="RGB", adjust_orientation=True)
    plan.windows = np.column_stack([np.zeros_like(plan.upright), plan.upright])
    flat = dec.finish_jpegs(dec.start_batch(plan), dec.current_stream())
    images = Batch.from_packed(flat, np.column_stack([plan.upright, np.full(len(samples), 3)]), "HWC")
    assert images[5].shape == (48, 64, 3) and images[9].shape == (40, 70, 3)
    dec.decode([bytes(s) for s in samples])
    assert {k: v for k, v in dec.stats.items() if v} == {
        "lane_batches": 1, "lane_gpu": routes["gpu"], "lane_cpu_core": routes["cpu_core"],
        "lane_cpu_codec": routes["cpu_codec"], "general_batches": 1, "general_gpu": 6, "general_cpu": 7}
    dec.close()


def test_gather_places_crops_and_pieces_at_offsets():
    from sluice.kernels.crops import gather_hwc_crops

    a = torch.arange(3 * 4 * 5, dtype=torch.uint8).view(3, 4, 5)
    b = torch.arange(100, 100 + 3 * 2 * 3, dtype=torch.uint8).view(3, 2, 3)
    out = torch.zeros(60, dtype=torch.uint8)
    gather_hwc_crops([a, b], np.array([[1, 1, 2, 3], [0, 0, 2, 3]]), out=out, offsets=np.array([30, 0]))
    assert torch.equal(out[30:48].view(2, 3, 3), a[:, 1:3, 1:4].permute(1, 2, 0))
    assert torch.equal(out[:18].view(2, 3, 3), b.permute(1, 2, 0))
    pieces = torch.arange(7, dtype=torch.uint8)
    GpuImageDecoder._place(pieces, np.array([3, 4]), out, np.array([50, 20]))
    assert out[50:53].tolist() == [0, 1, 2] and out[20:24].tolist() == [3, 4, 5, 6]
    with pytest.raises(ValueError, match="offsets need"):
        gather_hwc_crops([a], np.array([[0, 0, 1, 1]]), offsets=np.array([0]))


@pytest.mark.cuda
def test_gather_offsets_on_the_gpu_equal_the_cpu():
    from sluice.kernels.crops import gather_hwc_crops

    images = [torch.randint(0, 255, (3, 20 + i, 30 - i), dtype=torch.uint8) for i in range(5)]
    windows = np.array([[i, 2 * i, 10, 12 + i] for i in range(5)])
    offsets = np.array([0, 2000, 400, 4000, 1000])
    want = torch.zeros(6000, dtype=torch.uint8)
    gather_hwc_crops(images, windows, out=want, offsets=offsets)
    got = torch.zeros(6000, dtype=torch.uint8, device="cuda")
    gather_hwc_crops([t.cuda() for t in images], windows, out=got, offsets=offsets)
    assert torch.equal(got.cpu(), want)

