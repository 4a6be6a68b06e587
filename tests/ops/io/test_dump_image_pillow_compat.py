"""fn.dump_image writes DALI's file names (<sample>-<suffix>-0.ppm, in the working directory) as plain PPM that
Pillow reads back to the images (grey ones in three channels), and passes the batch on unchanged."""

import numpy as np
import pytest
from PIL import Image

import sluice
from sluice import fn
from sluice.errors import PipelineError
from sluice.testing import run_op

RNG = np.random.default_rng(5)
IMAGES = [RNG.integers(0, 256, s, dtype=np.uint8) for s in ((4, 6, 3), (3, 2, 1), (5, 5, 3))]


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=pytest.mark.cuda)])
def test_written_files_read_back_with_pillow(tmp_path, monkeypatch, device):
    monkeypatch.chdir(tmp_path)
    out = run_op("dump_image", IMAGES, layout="HWC", suffix="dbg", device=device)
    for x, y in zip(IMAGES, out):
        np.testing.assert_array_equal(y.cpu().numpy(), x)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0-dbg-0.ppm", "1-dbg-0.ppm", "2-dbg-0.ppm"]
    for i, x in enumerate(IMAGES):
        with Image.open(tmp_path / f"{i}-dbg-0.ppm") as im:
            assert im.format == "PPM" and im.mode == "RGB"
            np.testing.assert_array_equal(np.asarray(im), np.repeat(x, 3 // x.shape[2], axis=2))


def test_chw_input_and_errors(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    chw = [IMAGES[0].transpose(2, 0, 1).copy()]

    @sluice.pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def pipe():  # run_op takes input_layout for itself
        return fn.dump_image(fn.external_source(source=lambda: chw, cycle=True), input_layout="CHW")

    p = pipe()
    p.run()
    p.close()
    with Image.open(tmp_path / "0--0.ppm") as im:
        np.testing.assert_array_equal(np.asarray(im), IMAGES[0])
    with pytest.raises(PipelineError, match="uint8"):
        run_op("dump_image", [IMAGES[0].astype(np.float32)])
    with pytest.raises(PipelineError, match="sample 0.*2 channels"):
        run_op("dump_image", [IMAGES[0][..., :2].copy()])
