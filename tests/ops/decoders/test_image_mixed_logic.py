"""The mixed decoder's batch logic (routing, split scheduling, pinned staging, region mapping under EXIF
orientation, CPU retry, output assembly) run on the CPU: torch.cuda is replaced by no-op streams and torchvision's
batched nvJPEG by a stand-in that decodes with libjpeg-turbo and returns CHW tensors as torchvision does (the
``fake_gpu`` fixture of conftest.py).
The real GPU is exercised by test_image_gpu.py (cuda mark)."""

from __future__ import annotations

import enum

import numpy as np
import pytest
import torch

from image_fixtures import (bad_inputs, cmyk_jpeg, corrupt_jpeg, encode, fake_cuda, pattern, run_decoder,
                            with_orientation)
from sluice import types
from sluice.backends.image import decode, gpu
from sluice.backends.image.gpu import GpuImageDecoder, to_output_type_gpu
from sluice.backends.image.cpu import to_output_type


def _jpegs(n):
    return [encode(pattern(40 + 4 * i, 56 + 2 * i, seed=i), "JPEG", quality=90, subsampling=i % 3) for i in range(n)]


def test_split_and_assembly(fake_gpu):
    data = _jpegs(12) + [encode(pattern(30, 20), "PNG"), cmyk_jpeg(pattern(16, 16)),
                         encode(pattern(20, 20), "JPEG", progressive=True)]
    dec = GpuImageDecoder(torch.device("cpu"), cpu_load=0.4, adaptive=False)
    out = dec.decode(data)
    assert dec.last_split["cpu"] > 0 and dec.last_split["cuda"] > 0 and dec.last_split["hw"] == 0
    assert dec.last_split["cpu"] + dec.last_split["cuda"] == 12  # PNG, CMYK and progressive are not GPU work
    assert fake_gpu["batches"] == [dec.last_split["cuda"]]  # one batched call, not one per sample
    for d, t in zip(data, out):
        assert t.is_contiguous() and t.dtype == torch.uint8
        np.testing.assert_array_equal(t.numpy(), decode(d))
    dec.close()


def test_truncated_jpeg_is_not_sent_to_the_gpu(fake_gpu):
    good = _jpegs(1)[0]
    dec = GpuImageDecoder(torch.device("cpu"), cpu_load=0.0, adaptive=False)
    with pytest.raises(ValueError, match="'t.jpg'.*truncated"):
        dec.decode([good, good[:-200]], sources=["g.jpg", "t.jpg"])
    assert fake_gpu["batches"] == [1]


def test_gpu_failure_retries_on_cpu_and_names_the_file(fake_gpu):
    data = _jpegs(4)
    fake_gpu["fail"] = True
    dec = GpuImageDecoder(torch.device("cpu"), cpu_load=0.0, adaptive=False)
    out = dec.decode(data)
    for d, t in zip(data, out):
        np.testing.assert_array_equal(t.numpy(), decode(d))
    with pytest.raises(ValueError, match="'bad.jpg' with simplejpeg"):
        dec.decode([data[1], corrupt_jpeg(data[0])], sources=["ok.jpg", "bad.jpg"])


def test_damaged_stream_the_gpu_tolerates_still_raises(fake_gpu):
    data = _jpegs(3)
    fake_gpu["tolerant"] = True  # the stand-in decodes the damaged stream without an error, as nvJPEG may
    dec = GpuImageDecoder(torch.device("cpu"), cpu_load=0.0, adaptive=False)
    with pytest.raises(ValueError, match="'bad.jpg' with simplejpeg"):
        dec.decode([data[0], corrupt_jpeg(data[1]), data[2]], sources=["a.jpg", "bad.jpg", "c.jpg"])
    assert fake_gpu["batches"] == [3]  # it went to the GPU, then the scan check sent it to libjpeg-turbo
    out = dec.decode(data)  # intact streams are not re-decoded
    assert dec.stats["cpu_retries"] == 1
    for d, t in zip(data, out):
        np.testing.assert_array_equal(t.numpy(), decode(d))


def test_deferred_scan_check_raises_when_the_batch_is_taken(fake_gpu):
    data = _jpegs(3)
    fake_gpu["tolerant"] = True
    dec = GpuImageDecoder(torch.device("cpu"), cpu_load=0.0, adaptive=False)
    checks = []
    out = dec.decode([data[0], corrupt_jpeg(data[1]), data[2]], sources=["a.jpg", "bad.jpg", "c.jpg"],
                     defer=checks.append)
    assert len(out) == 3 and len(checks) == 1  # decoding returned; the verdict waits in the check
    with pytest.raises(ValueError, match="'bad.jpg' with simplejpeg"):
        checks[0]()
    checks.clear()
    dec.decode(data, defer=checks.append)
    checks[0]()  # intact streams pass


def test_cpu_share_adapts_to_measured_speed(fake_gpu):
    dec = GpuImageDecoder(torch.device("cpu"), cpu_load=0.5, adaptive=True)
    before = dec.shares["cpu"]
    for _ in range(4):  # the first call starts the clock; three more fill the tuner's window
        dec.decode(_jpegs(8))
    assert dec.shares["cpu"] != before  # moved by the measured batch speed, not the initial guess
    fixed = GpuImageDecoder(torch.device("cpu"), cpu_load=0.5, adaptive=False)
    for _ in range(3):
        fixed.decode(_jpegs(8))
    assert fixed.shares["cpu"] == 0.5
    with pytest.raises(ValueError, match="Invalid cpu_load"):
        GpuImageDecoder(torch.device("cpu"), cpu_load=1.5)


@pytest.mark.parametrize("orientation", [1, 2, 5, 6, 7, 8])
@pytest.mark.parametrize("op,kw", [
    ("decoders.image_crop", dict(crop=(20, 28), crop_pos_x=0.2, crop_pos_y=0.9)),
    ("decoders.image_random_crop", dict(random_area=[0.2, 0.5], seed=11)),
    ("decoders.image", dict(output_type=types.YCbCr)),
    ("decoders.image", dict(output_type=types.GRAY, dtype=types.FLOAT)),
])
def test_mixed_operator_matches_cpu_operator(fake_gpu, orientation, op, kw):
    img = pattern(48, 64)
    data = [with_orientation(img, orientation, "JPEG", quality=95)] * 3 + [encode(img, "PNG")]
    mixed = run_decoder(op, data, device="mixed", ctx_device=torch.device("cpu"), **kw)
    cpu = run_decoder(op, data, **kw)
    assert mixed.layout() == "HWC"
    for i in range(len(data)):
        assert mixed[i].shape == cpu[i].shape and mixed[i].dtype == cpu[i].dtype
        tol = 1.0 / 255 if mixed[i].dtype == torch.float32 else 1
        assert (mixed[i].double() - cpu[i].double()).abs().max().item() <= tol


@pytest.mark.parametrize("output_type", ["RGB", "BGR", "GRAY", "YCbCr"])
def test_torch_color_conversion_matches_numpy(output_type):
    for img in (pattern(9, 7), pattern(9, 7, 1)):
        ref = to_output_type(img, output_type)
        got = to_output_type_gpu(torch.from_numpy(img), output_type).numpy()
        assert got.shape == ref.shape
        assert np.abs(got.astype(int) - ref.astype(int)).max() <= 1


def test_pixel_limit_in_both_devices(fake_gpu):
    from sluice.backends.image import get_max_image_pixels, set_max_image_pixels
    from sluice.errors import SampleError

    data = [encode(pattern(40, 50), "JPEG"), encode(pattern(40, 50), "PNG")]
    small = encode(pattern(20, 20), "JPEG")
    old = get_max_image_pixels()
    set_max_image_pixels(1999)
    try:
        for d in data:
            with pytest.raises(SampleError, match=r"'/x/big.img'.*2000 pixels, above the limit of 1999"):
                run_decoder("decoders.image", [d], sources=["/x/big.img"])
            with pytest.raises(SampleError, match=r"'/x/big.img'.*2000 pixels, above the limit of 1999") as err:
                run_decoder("decoders.image", [small, d], device="mixed", ctx_device=torch.device("cpu"),
                            sources=["/x/ok.img", "/x/big.img"])
            assert err.value.index == 1 and err.value.source == "/x/big.img"
    finally:
        set_max_image_pixels(old)


def test_mixed_bad_input_names_sample_and_file(fake_gpu):
    from sluice.errors import SampleError

    good = encode(pattern(64, 64), "JPEG")
    cases = bad_inputs(good)
    for reason, data in cases.items():
        with pytest.raises(SampleError) as err:
            run_decoder("decoders.image", [good, data, good], device="mixed", ctx_device=torch.device("cpu"),
                        sources=["/d/a.jpg", "/d/bad.jpg", "/d/c.jpg"])
        assert err.value.index == 1 and reason in str(err.value) and "/d/bad.jpg" in str(err.value)


# --- nvImageCodec glue, with a stand-in module that decodes on the CPU -------------------------------------------
class _FakeNvimgcodec:
    """The parts of nvidia.nvimgcodec that sluice uses, decoding with sluice's CPU decoder; images come back as
    HWC torch tensors (which speak DLPack like nvimgcodec.Image)."""

    class BackendKind(enum.Enum):
        HW_GPU_ONLY = 1
        GPU_ONLY = 2

    class ColorSpec(enum.Enum):
        RGB = 1
        GRAY = 2

    class Backend:
        def __init__(self, kind, load_hint=1.0):
            self.kind = kind

    class DecodeParams:
        def __init__(self, color_spec, allow_any_depth, apply_exif_orientation):
            self.color_spec, self.orient = color_spec, apply_exif_orientation

    class Region:
        def __init__(self, start_y, start_x, end_y, end_x):
            self.box = (start_y, start_x, end_y, end_x)

    class CodeStream:
        def __init__(self, data, region=None):
            self.data, self.region = bytes(data), region

        def get_sub_code_stream(self, region):
            return _FakeNvimgcodec.CodeStream(self.data, region)

    calls: list = []
    fail_hw = False
    no_sm_decoder = False  # as nvImageCodec 0.9 on CUDA 13: "Could not create decoder" for GPU_ONLY

    class Decoder:
        def __init__(self, device_id, backends, max_num_cpu_threads=0, options=""):
            self.kinds = [b.kind for b in backends]
            if _FakeNvimgcodec.no_sm_decoder and self.kinds == [_FakeNvimgcodec.BackendKind.GPU_ONLY]:
                raise RuntimeError("Internal error - Could not create decoder. Code: 7")

        def decode(self, srcs, params=None, cuda_stream=0):
            _FakeNvimgcodec.calls.append((self.kinds[0].name, len(srcs), cuda_stream))
            if _FakeNvimgcodec.fail_hw and self.kinds[0].name == "HW_GPU_ONLY" and len(srcs) > 1:
                raise RuntimeError("hardware decoder: out of resources")
            out = []
            for cs in (srcs if isinstance(srcs, list) else [srcs]):
                data = cs if isinstance(cs, bytes) else cs.data
                gray = params is not None and params.color_spec is _FakeNvimgcodec.ColorSpec.GRAY
                roi = None
                if getattr(cs, "region", None) is not None and self.kinds[0].name == "HW_GPU_ONLY":
                    out.append(None)  # nvJPEG's hardware backend has no region decode
                    continue
                if getattr(cs, "region", None) is not None:
                    y0, x0, y1, x1 = cs.region.box
                    roi = (y0, x0, y1 - y0, x1 - x0)
                out.append(torch.from_numpy(decode(data, output_type="GRAY" if gray else "RGB",
                                                   adjust_orientation=False, roi=roi)))
            return out


@pytest.fixture
def fake_nvimgcodec(monkeypatch):
    _FakeNvimgcodec.calls = []
    _FakeNvimgcodec.fail_hw = False
    _FakeNvimgcodec.no_sm_decoder = False
    fake_cuda(monkeypatch)
    monkeypatch.setattr(gpu, "nvimgcodec_module", lambda: _FakeNvimgcodec)
    return _FakeNvimgcodec


@pytest.mark.parametrize("output_type", ["RGB", "GRAY", "BGR"])
def test_nvimgcodec_paths_regions_and_jpeg2000(fake_nvimgcodec, output_type):
    img = pattern(48, 64)
    data = _jpegs(10) + [encode(img, "JPEG2000", irreversible=False), with_orientation(img, 6, "JPEG", quality=95)]
    rois = [None] * 10 + [(4, 6, 20, 30), (5, 7, 30, 20)]
    dec = GpuImageDecoder(torch.device("cpu"), cpu_load=0.2, hw_decoder_load=0.6, adaptive=False)
    assert dec.backend_name == "nvImageCodec (hardware JPEG + CUDA nvJPEG)"
    out = dec.decode(data, rois=rois, output_type=output_type)
    kinds = {k for k, _, _ in fake_nvimgcodec.calls[1:]}  # [0] is the hardware probe
    assert kinds == {"HW_GPU_ONLY", "GPU_ONLY"} and dec.last_split["cpu"] > 0
    assert dec.last_split["j2k"] == 1
    for d, roi, t in zip(data, rois, out):
        ref = decode(d, output_type=output_type, roi=roi)
        assert t.shape == ref.shape and t.is_contiguous()
        assert np.abs(t.numpy().astype(int) - ref.astype(int)).max() <= 1
    dec.close()


def test_failing_hardware_path_falls_back_to_the_cuda_decoder(fake_nvimgcodec):
    data = _jpegs(8)
    dec = GpuImageDecoder(torch.device("cpu"), cpu_load=0.0, hw_decoder_load=0.5, adaptive=False)
    fake_nvimgcodec.fail_hw = True
    for k in range(4):
        out = dec.decode(data)
        for d, t in zip(data, out):
            np.testing.assert_array_equal(t.numpy(), decode(d))
        assert dec.stats["cpu_retries"] == 0  # the CUDA decoder took the hardware engines' share
        assert (dec.last_split["hw"] > 0) == (k < 3)  # after three failed batches the engines are left out
    dec.close()


def test_without_an_sm_decoder_torchvision_takes_every_jpeg(fake_nvimgcodec, fake_gpu, monkeypatch):
    """nvImageCodec without a decoder on the SMs (CUDA 13 builds): torchvision's batched nvJPEG, which drives the
    same hardware engines, decodes every JPEG in one call; nvImageCodec's hardware path takes a batch it fails on."""
    monkey_nv = fake_nvimgcodec
    monkey_nv.no_sm_decoder = True
    monkeypatch.setattr(gpu, "nvimgcodec_module", lambda: monkey_nv)  # fake_gpu had set None
    data = _jpegs(9)
    dec = GpuImageDecoder(torch.device("cpu"), cpu_load=0.0, hw_decoder_load=0.9, adaptive=False)
    assert dec.engines_via_torchvision and "torchvision" in dec.backend_name
    out = dec.decode(data, rois=[None] * 8 + [(3, 4, 20, 30)])
    assert dec.last_split["cuda"] == 9 and dec.last_split["hw"] == 0 and fake_gpu["batches"] == [9]
    for k, (d, t) in enumerate(zip(data, out)):
        np.testing.assert_array_equal(t.numpy(), decode(d, roi=(3, 4, 20, 30) if k == 8 else None))
    fake_gpu["fail"] = True
    out = dec.decode(data)
    assert dec.stats["cpu_retries"] == 0 and monkey_nv.calls[-1][:2] == ("HW_GPU_ONLY", 9)
    for d, t in zip(data, out):
        np.testing.assert_array_equal(t.numpy(), decode(d))
    dec.close()


def test_hardware_engines_decode_whole_images_and_the_window_is_cut_on_the_gpu(fake_nvimgcodec):
    data = _jpegs(6)
    rois = [(2 + i, 3, 20, 24 + i) for i in range(6)]
    dec = GpuImageDecoder(torch.device("cpu"), cpu_load=0.0, hw_decoder_load=1.0, adaptive=False)
    out = dec.decode(data, rois=rois)
    assert dec.last_split["hw"] == 6 and dec.stats["cpu_retries"] == 0
    for d, roi, t in zip(data, rois, out):
        np.testing.assert_array_equal(t.numpy(), decode(d, roi=roi))
    dec.close()


def test_one_allocation_packs_a_batch_into_one_torch_buffer():
    """Decoded images (crop views among them) come back contiguous, equal, and sharing one torch allocation, so
    one record_stream covers the batch; mixed types keep their own storage, made contiguous."""
    from sluice.backends.image.gpu import one_allocation

    whole = torch.arange(5 * 7 * 3, dtype=torch.uint8).view(5, 7, 3)
    images = [whole[1:4, 2:6], torch.full((2, 3, 3), 9, dtype=torch.uint8), whole]
    packed = one_allocation(images)
    assert [tuple(t.shape) for t in packed] == [(3, 4, 3), (2, 3, 3), (5, 7, 3)]
    assert all(t.is_contiguous() for t in packed)
    assert all(torch.equal(a, b) for a, b in zip(packed, images))
    assert len({t.untyped_storage().data_ptr() for t in packed}) == 1
    mixed = one_allocation([whole[1:4, 2:6], torch.zeros(2, 2, 3, dtype=torch.uint16)])
    assert all(t.is_contiguous() for t in mixed) and torch.equal(mixed[0], whole[1:4, 2:6])
    assert one_allocation([whole[1:4, 2:6]])[0].is_contiguous()
    single = one_allocation([whole])[0]  # a lone image is copied too (it may live in nvImageCodec's memory)
    assert torch.equal(single, whole) and single.untyped_storage().data_ptr() != whole.untyped_storage().data_ptr()
    batch = list(torch.arange(2 * 4 * 3, dtype=torch.uint8).view(-1, 3).split([4, 4]))
    views = [t.view(2, 2, 3) for t in batch]  # views of one buffer (torchvision's batch): handed on as they are
    assert [t.data_ptr() for t in one_allocation(views)] == [t.data_ptr() for t in views]


def test_the_decoders_threads_are_its_runtimes(fake_gpu):
    """The decoder's GPU-path and decode-ahead pools are made by the runtime it is given (the pipeline's), of the
    sizes it always had, and closing the runtime ends their threads; a decoder made without one has its own, which
    its close() ends."""
    import threading

    from sluice.runtime import Runtime

    rt = Runtime(num_threads=2)
    dec = GpuImageDecoder(torch.device("cpu"), cpu_load=0.0, adaptive=False, runtime=rt)
    assert rt.made["pools"] == 2
    assert dec._gpu_threads.threads == 4 * gpu.AHEAD_BATCHES and dec._ahead.threads == gpu.AHEAD_BATCHES
    data = _jpegs(3)
    images, _ = dec.start(data).future.result()  # decoded ahead, in its decode-ahead and GPU-path pools
    for d, t in zip(data, images):
        np.testing.assert_array_equal(t.numpy(), decode(d))
    threads = rt.threads()
    assert {t.name.rsplit("_", 1)[0] for t in threads} == {"sluice-gpu-decode", "sluice-decode-ahead"}
    rt.close()
    assert not any(t.is_alive() for t in threads)

    before = set(threading.enumerate())
    own = GpuImageDecoder(torch.device("cpu"), cpu_load=0.0, adaptive=False)
    own.decode(data)
    own.close()
    assert [t.name for t in threading.enumerate() if t not in before] == []
