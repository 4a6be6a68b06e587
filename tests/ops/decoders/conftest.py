"""Fixtures of the image decoder tests that stand in for the GPU on the CPU."""

from __future__ import annotations

import enum
import sys
import types as pytypes

import pytest
import simplejpeg
import torch

from image_fixtures import fake_cuda


@pytest.fixture
def fake_gpu(monkeypatch):
    """torch.cuda replaced by no-ops and torchvision's batched nvJPEG (``torchvision.io.decode_jpeg`` of a list) by a
    stand-in that decodes with libjpeg-turbo (simplejpeg) and returns CHW tensors, as torchvision does. The returned
    dict counts the batched calls (``batches``) and makes them fail (``fail``) or tolerate damage (``tolerant``)."""
    from sluice.backends.image import gpu

    calls = {"batches": [], "fail": False, "tolerant": False}

    class ImageReadMode(enum.Enum):
        RGB = "RGB"
        GRAY = "GRAY"

    def decode_jpeg(data, mode, device):
        assert isinstance(data, list) and all(t.dtype == torch.uint8 for t in data)
        calls["batches"].append(len(data))
        if calls["fail"]:
            raise RuntimeError("nvjpeg: bitstream not supported")
        out = []
        for t in data:
            arr = simplejpeg.decode_jpeg(t.numpy(), colorspace="GRAY" if mode is ImageReadMode.GRAY else "RGB",
                                         strict=not calls["tolerant"])  # tolerant: like nvJPEG on some damage
            out.append(torch.from_numpy(arr).permute(2, 0, 1).contiguous())
        return out

    io_mod = pytypes.ModuleType("torchvision.io")
    io_mod.decode_jpeg, io_mod.ImageReadMode = decode_jpeg, ImageReadMode
    tv = pytypes.ModuleType("torchvision")
    tv.io = io_mod
    monkeypatch.setitem(sys.modules, "torchvision", tv)
    monkeypatch.setitem(sys.modules, "torchvision.io", io_mod)
    fake_cuda(monkeypatch)
    monkeypatch.setattr(gpu, "nvimgcodec_module", lambda: None)
    calls["decode_jpeg"] = decode_jpeg
    calls["ImageReadMode"] = ImageReadMode
    return calls
