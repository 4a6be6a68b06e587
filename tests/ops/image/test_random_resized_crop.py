"""fn.random_resized_crop: windows from the sample's seeded generator (same as random_crop_window), pixels
against Pillow's BILINEAR resize of that box (<= 1 grey level), determinism, GPU == CPU."""

import numpy as np
import pytest
from PIL import Image

from sluice.ops.decoders.crop_window import random_crop_window
from sluice.testing import run_op


def _img(h=60, w=80, seed=0):
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([xx * 3, yy * 4, (xx + yy) * 2], axis=2) % 256
    return base.astype(np.uint8)


def test_matches_pillow_on_the_drawn_window(monkeypatch):
    import sluice.ops.image.random_resized_crop as rrc

    seen = []
    draw = rrc._window

    def spy(rng, shape, layout, args):
        state = rng.bit_generator.state
        win = draw(rng, shape, layout, args)
        rng.bit_generator.state = state  # the window is random_crop_window's draw from this generator
        assert random_crop_window(rng, shape[0], shape[1]) == (win[0], win[1], win[2] - win[0], win[3] - win[1])
        seen.append(win)
        return win

    monkeypatch.setattr(rrc, "_window", spy)
    imgs = [_img(), _img(50, 40)]
    out = run_op("random_resized_crop", imgs, layout="HWC", size=[24, 32], num_threads=1)
    assert out.shape() == [(24, 32, 3), (24, 32, 3)]
    for i, (img, (y0, x0, y1, x1)) in enumerate(zip(imgs, seen)):
        y, x, h, w = int(y0), int(x0), int(y1 - y0), int(x1 - x0)
        ref = np.asarray(Image.fromarray(img).resize((32, 24), Image.BILINEAR, box=(x, y, x + w, y + h)))
        assert np.abs(out[i].numpy().astype(int) - ref.astype(int)).max() <= 1


def test_deterministic_and_varies_with_seed():
    imgs = [_img()] * 4
    a = run_op("random_resized_crop", imgs, layout="HWC", size=[16, 16], seed=1)
    b = run_op("random_resized_crop", imgs, layout="HWC", size=[16, 16], seed=1)
    c = run_op("random_resized_crop", imgs, layout="HWC", size=[16, 16], seed=2)
    for x, y in zip(a.samples, b.samples):
        np.testing.assert_array_equal(x.numpy(), y.numpy())
    assert any(not np.array_equal(x.numpy(), y.numpy()) for x, y in zip(a.samples, c.samples))


def test_argument_errors():
    with pytest.raises(Exception, match="size"):
        run_op("random_resized_crop", [_img()], layout="HWC")
    with pytest.raises(Exception, match="random_area"):
        run_op("random_resized_crop", [_img()], layout="HWC", size=[8, 8], random_area=[0.5, 2.0])


@pytest.mark.cuda
def test_gpu_equals_cpu():
    imgs = [_img(), _img(50, 40), _img(30, 90)]
    cpu = run_op("random_resized_crop", imgs, layout="HWC", size=[24, 24], seed=3)
    gpu = run_op("random_resized_crop", imgs, layout="HWC", size=[24, 24], seed=3, device="gpu")
    for a, b in zip(cpu.samples, gpu.samples):
        assert (a.int() - b.cpu().int()).abs().max() <= 1
