"""device="mixed" decoders (nvImageCodec hardware + CUDA nvJPEG, or torchvision's nvJPEG, plus CPU share) against
the CPU decoder (libjpeg-turbo / OpenCV / Pillow). Run on a CUDA machine.

Tolerances, nvJPEG vs libjpeg-turbo on the same JPEG (smooth pattern + noise, quality 90-95):
* with ``jpeg_fancy_upsampling=True`` (both upsample chroma the same way; only the IDCTs differ): mean absolute
  difference <= 1.0 level, max <= 12;
* default (nvJPEG's plain chroma upsampling): mean <= 2.0, max <= 40 (at chroma edges);
* lossless formats and the samples the scheduler gives to the CPU: exact.
"""

from __future__ import annotations

import pytest
import torch

from image_fixtures import bad_inputs, cmyk_jpeg, encode, pattern, run_decoder, with_orientation
from sluice import types
from sluice.errors import SampleError

pytestmark = pytest.mark.cuda


def _jpegs(n: int = 12):
    out = []
    for i in range(n):
        img = pattern(64 + 8 * i, 96 + 4 * i, seed=i)
        out.append(encode(img, "JPEG", quality=90 + (i % 6), subsampling=i % 3))
    return out


def _diff(gpu: torch.Tensor, cpu: torch.Tensor) -> tuple[float, int]:
    d = (gpu.cpu().to(torch.int32) - cpu.to(torch.int32)).abs()
    return d.float().mean().item(), int(d.max())


def _check(mixed, cpu, mean_tol, max_tol):
    assert mixed.device == "gpu" and len(mixed) == len(cpu)
    for i in range(len(cpu)):
        t = mixed[i]
        assert t.is_cuda and t.dtype == cpu[i].dtype and t.is_contiguous() and t.shape == cpu[i].shape, i
        mean, mx = _diff(t, cpu[i])
        assert mean <= mean_tol and mx <= max_tol, (i, mean, mx)


@pytest.mark.parametrize("fancy,mean_tol,max_tol", [(True, 1.0, 12), (False, 2.0, 40)])
def test_mixed_jpeg_matches_cpu(fancy, mean_tol, max_tol):
    data = _jpegs()
    gpu = run_decoder("decoders.image", data, device="mixed", jpeg_fancy_upsampling=fancy)
    _check(gpu, run_decoder("decoders.image", data), mean_tol, max_tol)
    # one allocation of torch's caching allocator for the batch (one record_stream protects it)
    assert len({gpu[i].untyped_storage().data_ptr() for i in range(len(data))}) == 1


def test_mixed_other_formats_and_fallbacks_exact():
    img = pattern(40, 56)
    data = [encode(img, "PNG"), encode(img, "WEBP", lossless=True), encode(img, "BMP"), encode(img, "TIFF"),
            encode(img, "GIF"), encode(img, "JPEG", progressive=True), cmyk_jpeg(img),
            encode(pattern(20, 30, 1)[:, :, 0], "PNG"),
            encode(img, "JPEG2000", irreversible=False)]  # lossless JPEG 2000: nvJPEG2000 on the GPU, exact
    gpu = run_decoder("decoders.image", data, device="mixed")
    cpu = run_decoder("decoders.image", data)
    _check(gpu, cpu, 0.0, 0)  # lossless formats, and formats decoded on the CPU inside mixed: identical


@pytest.mark.parametrize("output_type", [types.GRAY, types.BGR, types.YCbCr])
def test_mixed_output_types(output_type):
    data = _jpegs(6)
    gpu = run_decoder("decoders.image", data, device="mixed", output_type=output_type, jpeg_fancy_upsampling=True)
    cpu = run_decoder("decoders.image", data, output_type=output_type)
    _check(gpu, cpu, 1.5, 16)


def test_mixed_float_and_orientation():
    img = pattern(48, 64)
    data = [with_orientation(img, o, "JPEG", quality=95) for o in range(1, 9)]
    gpu = run_decoder("decoders.image", data, device="mixed", dtype=types.FLOAT, jpeg_fancy_upsampling=True)
    cpu = run_decoder("decoders.image", data, dtype=types.FLOAT)
    for i in range(8):
        assert gpu[i].dtype == torch.float32 and gpu[i].shape == cpu[i].shape
        assert (gpu[i].cpu() - cpu[i]).abs().mean().item() <= 1.0 / 255


@pytest.mark.parametrize("orientation", [1, 3, 6, 8])
def test_mixed_crop_decodes_the_same_window(orientation):
    img = pattern(96, 128)
    data = [with_orientation(img, orientation, "JPEG", quality=95, subsampling=0)] * 4
    kw = dict(crop=(40, 56), crop_pos_x=0.25, crop_pos_y=0.75)
    gpu = run_decoder("decoders.image_crop", data, device="mixed", jpeg_fancy_upsampling=True, **kw)
    _check(gpu, run_decoder("decoders.image_crop", data, **kw), 1.0, 12)
    rc = dict(random_area=[0.2, 0.6], seed=3)
    gpu = run_decoder("decoders.image_random_crop", data, device="mixed", jpeg_fancy_upsampling=True, **rc)
    _check(gpu, run_decoder("decoders.image_random_crop", data, **rc), 1.0, 12)
    sl = dict(extra=([[0.1, 0.2]] * 4, [[0.5, 0.4]] * 4))
    gpu = run_decoder("decoders.image_slice", data, device="mixed", jpeg_fancy_upsampling=True, **sl)
    _check(gpu, run_decoder("decoders.image_slice", data, **sl), 1.0, 12)


def test_split_scheduler_uses_every_path():
    from sluice.backends.image import decode
    from sluice.backends.image.gpu import GpuImageDecoder

    data = _jpegs(48)
    dec = GpuImageDecoder(0, cpu_load=0.25, adaptive=False, jpeg_fancy_upsampling=True)
    try:
        for _ in range(3):
            out = dec.decode(data)
            assert dec.last_split["cpu"] > 0 and dec.last_split["cuda"] + dec.last_split["hw"] > 0
            # the GPU paths really decoded (a failing path would be hidden by the CPU retry)
            assert dec.stats["gpu_batch_failures"] == 0, dec.stats
        torch.cuda.current_stream().synchronize()
        for d, t in zip(data, out):
            ref = torch.from_numpy(decode(d))
            assert _diff(t, ref)[0] <= 1.0
    finally:
        dec.close()


def test_mixed_bad_input_raises_naming_the_file():
    good = encode(pattern(64, 64), "JPEG")
    cases = bad_inputs(good)
    for reason, data in cases.items():
        with pytest.raises(SampleError) as err:
            run_decoder("decoders.image", [good, data, good], device="mixed",
                        sources=["/d/a.jpg", "/d/bad.jpg", "/d/c.jpg"])
        msg = str(err.value)
        assert "/d/bad.jpg" in msg and reason in msg and err.value.index == 1, msg


def test_mixed_in_a_pipeline(tmp_path):
    from sluice import fn, pipeline_def

    for c in range(2):
        (tmp_path / f"c{c}").mkdir()
        for i in range(4):
            img = pattern(50 + 10 * i, 70, seed=c * 10 + i)
            (tmp_path / f"c{c}" / f"{i}.jpg").write_bytes(encode(img, "JPEG", quality=92))

    @pipeline_def(batch_size=8, num_threads=2, device_id=0, seed=1)
    def pipe():
        files, labels = fn.readers.file(file_root=str(tmp_path))
        return (fn.decoders.image(files, device="mixed", jpeg_fancy_upsampling=True),
                fn.decoders.image(files, device="cpu"), labels)

    p = pipe()
    p.build()
    gpu, cpu, labels = p.run()
    assert gpu.device == "gpu" and gpu.layout() == "HWC"
    for i in range(8):
        assert gpu[i].is_cuda and gpu[i].shape == cpu[i].shape
        mean, mx = _diff(gpu[i], cpu[i])
        assert mean <= 1.0 and mx <= 12


def test_mixed_crop_decoder_prepares_in_the_cpu_stage(tmp_path, monkeypatch):
    """The mixed decoder's host work (probes, crop windows) runs in the pipeline's CPU stage, ahead of the device
    stage, and draws the same windows as the CPU decoder with the same seed."""
    import threading

    from sluice import fn, pipeline_def
    from sluice.schema import get_schema

    for i in range(8):
        (tmp_path / f"{i}.jpg").write_bytes(encode(pattern(60 + 8 * i, 90, seed=i), "JPEG", quality=92))
    mixed = get_schema("decoders.image_random_crop").kernel_for("mixed")
    threads = []
    prepare = mixed.prepare

    def spy(self, ctx, *inputs, args):
        threads.append(threading.current_thread().name)
        return prepare(self, ctx, *inputs, args=args)
    monkeypatch.setattr(mixed, "prepare", spy)

    def build(device):
        @pipeline_def(batch_size=4, num_threads=2, device_id=0, seed=7)
        def pipe():
            files, _ = fn.readers.file(file_root=str(tmp_path))
            return fn.decoders.image_random_crop(files, device=device, seed=11)
        p = pipe()
        p.build()
        return p

    gpu_pipe, cpu_pipe = build("mixed"), build("cpu")
    for _ in range(2):
        (gpu,), (cpu,) = gpu_pipe.run(), cpu_pipe.run()
        assert [tuple(gpu[i].shape) for i in range(4)] == [tuple(cpu[i].shape) for i in range(4)]
    assert len(threads) >= 2 and all("cpu" in name for name in threads), threads  # prefetching: more


@pytest.mark.parametrize("op", ["image", "image_random_crop"])
@pytest.mark.parametrize("reason", ["truncated", "corrupt", "unknown image format"])
def test_mixed_in_a_pipeline_names_a_bad_file(tmp_path, reason, op):
    """Batches are decoded ahead of the device stage (started from the CPU stage, plain JPEG batches in the fast
    lane): a bad file still raises naming it, from the iteration that holds it (its batch leaves the fast lane),
    and the good batches before it come out intact."""
    from sluice import fn, pipeline_def
    from sluice.errors import PipelineError

    good = encode(pattern(64, 80), "JPEG", quality=90)
    for i in range(8):
        (tmp_path / f"{i}.jpg").write_bytes(good)
    (tmp_path / "9_bad.jpg").write_bytes(bad_inputs(good)[reason])

    @pipeline_def(batch_size=4, num_threads=2, device_id=0, seed=1)
    def pipe():
        files, _ = fn.readers.file(file_root=str(tmp_path))
        return getattr(fn.decoders, op)(files, device="mixed")

    p = pipe()
    p.build()
    for _ in range(2):
        (images,) = p.run()
        assert all(images[i].shape == (64, 80, 3) for i in range(4)) or op != "image"
    with pytest.raises((PipelineError, SampleError)) as err:
        p.run()
    assert "9_bad.jpg" in str(err.value) and reason in str(err.value)
