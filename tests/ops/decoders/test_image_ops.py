"""fn.decoders.image / image_crop / image_random_crop / image_slice and fn.peek_image_shape on the CPU, against
Pillow (lossless: exact; JPEG: within 1 level, both being libjpeg-turbo)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from image_fixtures import encode, pattern, reference_rgb, run_decoder, with_orientation
from sluice import types
from sluice.errors import SampleError
from sluice.ops.decoders.crop_window import random_crop_window
from sluice.schema import _rng

IMG = pattern(30, 40)
PNG = encode(IMG, "PNG")
JPG = encode(IMG, "JPEG", quality=92)


def test_decode_mixed_formats_batch():
    gif = encode(IMG, "GIF")
    batch = run_decoder("decoders.image", [PNG, JPG, gif, encode(IMG, "BMP")])
    assert batch.layout() == "HWC" and batch.device == "cpu"
    np.testing.assert_array_equal(batch.at(0), IMG)
    assert np.abs(batch.at(1).astype(int) - reference_rgb(JPG)).max() <= 1
    np.testing.assert_array_equal(batch.at(2), reference_rgb(gif))
    np.testing.assert_array_equal(batch.at(3), IMG)


def test_output_types_and_dtypes():
    gray = run_decoder("decoders.image", [PNG], output_type=types.GRAY)
    assert gray.shape() == [(30, 40, 1)]
    bgr = run_decoder("decoders.image", [PNG], output_type=types.BGR)
    np.testing.assert_array_equal(bgr.at(0), IMG[:, :, ::-1])
    f = run_decoder("decoders.image", [PNG], dtype=types.FLOAT)
    assert f[0].dtype == torch.float32
    np.testing.assert_allclose(f.at(0), IMG / 255.0, atol=1e-6)
    g16 = pattern(8, 9, 1, dtype=np.uint16)[:, :, 0]
    out = run_decoder("decoders.image", [encode(g16, "PNG")], output_type=types.ANY_DATA, dtype=types.FLOAT)
    np.testing.assert_allclose(out.at(0)[:, :, 0], g16 / 65535.0, atol=1e-6)
    out8 = run_decoder("decoders.image", [encode(g16, "PNG")], output_type=types.GRAY)
    np.testing.assert_array_equal(out8.at(0)[:, :, 0], np.round(g16 / 257.0).astype(np.uint8))


def test_orientation_argument():
    data = with_orientation(IMG, 6, "PNG")
    up = run_decoder("decoders.image", [data])
    assert up.shape() == [(40, 30, 3)]
    np.testing.assert_array_equal(up.at(0), np.rot90(IMG, -1))
    raw = run_decoder("decoders.image", [data], adjust_orientation=False)
    np.testing.assert_array_equal(raw.at(0), IMG)


def test_image_crop():
    out = run_decoder("decoders.image_crop", [PNG], crop=(10, 20), crop_pos_x=1.0, crop_pos_y=0.0)
    np.testing.assert_array_equal(out.at(0), IMG[0:10, 20:40])
    out = run_decoder("decoders.image_crop", [PNG], crop_h=11, crop_w=13)  # centred
    np.testing.assert_array_equal(out.at(0), IMG[10:21, 14:27])
    # on a rotated image the window refers to the upright picture
    out = run_decoder("decoders.image_crop", [with_orientation(IMG, 8, "PNG")], crop=(5, 7), crop_pos_x=0,
                      crop_pos_y=0)
    np.testing.assert_array_equal(out.at(0), np.rot90(IMG, 1)[:5, :7])
    with pytest.raises(SampleError, match="crop_pos"):
        run_decoder("decoders.image_crop", [PNG], crop=(5, 5), crop_pos_x=1.5)
    with pytest.raises(SampleError, match="window size"):
        run_decoder("decoders.image_crop", [PNG])


def test_image_slice():
    out = run_decoder("decoders.image_slice", [PNG], extra=([[0.25, 0.5]], [[0.5, 0.5]]))  # WH order
    np.testing.assert_array_equal(out.at(0), IMG[15:30, 10:30])
    out = run_decoder("decoders.image_slice", [PNG], extra=([[2, 3]], [[4, 5]]), axis_names="HW",
                      normalized_anchor=False, normalized_shape=False)
    np.testing.assert_array_equal(out.at(0), IMG[2:6, 3:8])
    out = run_decoder("decoders.image_slice", [PNG], extra=([[2, 3]], [[4, 5]]), axes=[0, 1],
                      normalized_anchor=False, normalized_shape=False)
    np.testing.assert_array_equal(out.at(0), IMG[2:6, 3:8])
    with pytest.raises(SampleError, match="outside"):
        run_decoder("decoders.image_slice", [PNG], extra=([[0.8, 0.8]], [[0.5, 0.5]]))
    out = run_decoder("decoders.image_slice", [PNG], extra=([[0.8, 0.8]], [[0.5, 0.5]]),
                      out_of_bounds_policy="trim_to_shape")
    np.testing.assert_array_equal(out.at(0), IMG[24:30, 32:40])


def test_image_random_crop_matches_window_logic():
    seed = 77
    args = dict(random_area=[0.1, 0.5], random_aspect_ratio=[0.5, 2.0], num_attempts=10)
    out = run_decoder("decoders.image_random_crop", [PNG, PNG, PNG], seed=seed, **args)
    shapes = set()
    for i in range(3):
        # the same draw as the kernel makes: the pipeline's per-sample generator for iteration 0
        y, x, h, w = random_crop_window(_rng(seed, 0, i + 1), 30, 40, args["random_area"],
                                        args["random_aspect_ratio"], args["num_attempts"])
        np.testing.assert_array_equal(out.at(i), IMG[y:y + h, x:x + w])
        assert 0.1 * 0.9 <= h * w / 1200 <= 0.5 * 1.1
        shapes.add((h, w))
    assert len(shapes) > 1  # each sample draws its own window
    again = run_decoder("decoders.image_random_crop", [PNG, PNG, PNG], seed=seed, **args)
    assert again.shape() == out.shape()


def test_peek_image_shape():
    out = run_decoder("peek_image_shape", [PNG, JPG, with_orientation(IMG, 6, "JPEG"),
                                           encode(pattern(5, 6, 1)[:, :, 0], "PNG")])
    assert [tuple(t.tolist()) for t in out.samples] == [(30, 40, 3), (30, 40, 3), (40, 30, 3), (5, 6, 1)]
    assert out[0].dtype == torch.int64
    raw = run_decoder("peek_image_shape", [with_orientation(IMG, 6, "JPEG")], adjust_orientation=False,
                      dtype=types.INT32)
    assert raw[0].tolist() == [30, 40, 3] and raw[0].dtype == torch.int32


@pytest.mark.parametrize("op", ["decoders.image", "peek_image_shape"])
def test_bad_input_names_file_and_reason(op):
    cases = {b"": "empty", b"GIF89a-garbage": "header", JPG[: len(JPG) // 2]: "truncated",
             b"\x00" * 64: "unknown image format"}
    for data, reason in cases.items():
        if op == "peek_image_shape" and reason == "truncated":
            continue  # the header is intact: peeking works
        with pytest.raises(SampleError) as err:
            run_decoder(op, [PNG, data], sources=["/d/ok.png", "/d/bad.jpg"])
        assert err.value.index == 1 and err.value.source == "/d/bad.jpg"
        assert "/d/bad.jpg" in str(err.value) and reason in str(err.value)


def test_unknown_argument_is_explained():
    from sluice.errors import ArgumentError

    with pytest.raises(ArgumentError, match="Did you mean 'output_type'"):
        run_decoder("decoders.image", [PNG], output_typ=types.RGB)
    with pytest.raises(ArgumentError, match="dtype"):
        run_decoder("decoders.image", [PNG], dtype=types.INT8)


def test_pipeline_reader_to_decoder_names_the_bad_file(tmp_path):
    from sluice import fn, pipeline_def
    from sluice.errors import PipelineError

    for c in range(2):
        (tmp_path / f"c{c}").mkdir()
        for i in range(3):
            (tmp_path / f"c{c}" / f"{i}.png").write_bytes(encode(pattern(10 + i, 12, seed=c), "PNG"))
    (tmp_path / "c1" / "zz_bad.jpg").write_bytes(JPG[:100])

    @pipeline_def(batch_size=4, num_threads=2, device_id=None, seed=1)
    def pipe():
        files, labels = fn.readers.file(file_root=str(tmp_path))
        return fn.decoders.image(files, device="cpu"), fn.peek_image_shape(files), labels

    p = pipe()
    p.build()
    images, shapes, labels = p.run()
    assert images.layout() == "HWC" and images.shape() == [(10, 12, 3), (11, 12, 3), (12, 12, 3), (10, 12, 3)]
    assert [tuple(s.tolist()) for s in shapes.samples] == images.shape()
    np.testing.assert_array_equal(images.at(3), pattern(10, 12, seed=1))
    with pytest.raises(PipelineError, match=r"zz_bad\.jpg.*(truncated|corrupt)"):
        p.run()


def test_through_run_op_random_crop_is_seeded():
    from sluice.testing import run_op

    samples = [np.frombuffer(PNG, np.uint8)] * 4
    a = run_op("decoders.image_random_crop", samples, seed=5, random_area=[0.1, 0.4])
    b = run_op("decoders.image_random_crop", samples, seed=5, random_area=[0.1, 0.4])
    c = run_op("decoders.image_random_crop", samples, seed=6, random_area=[0.1, 0.4])
    assert a.shape() == b.shape() and a.layout() == "HWC"
    for i in range(4):
        np.testing.assert_array_equal(a.at(i), b.at(i))
        assert a.at(i).shape[0] * a.at(i).shape[1] <= 0.45 * 1200
    assert a.shape() != c.shape()  # another seed, other windows
