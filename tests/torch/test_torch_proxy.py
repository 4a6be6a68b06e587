"""sluice.torch.proxy: a user's Dataset / DataLoader feeding a pipeline that runs in the main process.

References: the pipeline's outputs are compared with the same arithmetic done with NumPy in the test, the
decoded images with Pillow, the decoded video frames with the barcode each frame carries (written with PyAV)."""

from __future__ import annotations

import collections
import io
import os
import signal
import time

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset

import sluice.torch.proxy as sp
from sluice import fn, pipeline_def
from sluice.errors import ArgumentError, PipelineError

Item = collections.namedtuple("Item", ["out", "index"])


@pipeline_def(batch_size=4, num_threads=2, device_id=None, seed=1)
def affine_pipe():
    x = fn.external_source(name="x")
    y = fn.external_source(name="y")
    return x * 2 + y, x


class AffineSet(Dataset):
    """Sample i: x = [i, i+1, i+2] (float32), y = i; the pipeline returns (2x + y, x)."""

    def __init__(self, proxy, n=10, kill_at=None, bad_names=False):
        self.proxy, self.n, self.kill_at, self.bad_names = proxy, n, kill_at, bad_names

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        x = np.arange(i, i + 3, dtype=np.float32)
        if self.bad_names:
            return self.proxy(x=x, z=np.float32(i))
        out, same_x = self.proxy(x=x, y=np.float32(i))
        return {"out": out, "x": same_x, "index": i, "name": f"s{i}"}


def expected(i):
    x = np.arange(i, i + 3, dtype=np.float32)
    return 2 * x + i


def check_batches(batches, n):
    seen = []
    for b in batches:
        assert isinstance(b["out"], torch.Tensor) and b["out"].dtype == torch.float32
        for row, x, idx, name in zip(b["out"], b["x"], b["index"].tolist(), b["name"]):
            np.testing.assert_array_equal(row.numpy(), expected(idx))
            np.testing.assert_array_equal(x.numpy(), np.arange(idx, idx + 3, dtype=np.float32))
            assert name == f"s{idx}"
            seen.append(idx)
    assert sorted(seen) == list(range(n))
    return seen


@pytest.mark.parametrize("num_workers,ctx", [(0, None), (2, "fork"), pytest.param(2, "spawn", marks=pytest.mark.slow)])
def test_proxy_dataloader_workers(num_workers, ctx):
    with sp.DALIServer(affine_pipe()) as server:
        loader = sp.DataLoader(server, AffineSet(server.proxy), batch_size=3, num_workers=num_workers,
                               multiprocessing_context=ctx, deterministic=True)
        seen = check_batches(list(loader), 10)
        assert seen == list(range(10))  # deterministic: sampler order
        assert len(loader) == 4
        # A second epoch over the same loader and server.
        check_batches(list(loader), 10)


def test_server_pickles_to_its_proxy():
    """A Dataset holding the server itself works under spawn: workers receive only the proxy."""
    import pickle

    server = sp.DALIServer(affine_pipe())
    handle = pickle.loads(pickle.dumps(server))
    ref = handle.proxy(x=np.zeros(3, np.float32), y=np.float32(0))
    assert isinstance(ref, tuple) and len(ref) == 2 and isinstance(ref[0], sp.ProxySample)
    server.stop()


def test_produce_data_with_a_plain_torch_dataloader():
    """Any DataLoader works with the proxy's collate; produce_data keeps the other fields and types."""
    with sp.DALIServer(affine_pipe()) as server:
        ds = AffineSet(server.proxy, n=5)
        loader = torch.utils.data.DataLoader(ds, batch_size=2, collate_fn=sp.collate,
                                             shuffle=True, generator=torch.Generator().manual_seed(0))
        batches = [server.produce_data(b) for b in loader]
        check_batches(batches, 5)


def test_namedtuple_and_shuffled_order_kept():
    class Named(AffineSet):
        def __getitem__(self, i):
            d = super().__getitem__(i)
            return Item(d["out"], i)

    with sp.Server(affine_pipe()) as server:
        loader = sp.DataLoader(server, Named(server.proxy, n=7), batch_size=3, shuffle=True,
                               generator=torch.Generator().manual_seed(3))
        for batch in loader:
            assert isinstance(batch, Item)
            for row, idx in zip(batch.out, batch.index.tolist()):
                np.testing.assert_array_equal(row.numpy(), expected(idx))


def test_worker_killed_mid_epoch_raises():
    with sp.DALIServer(affine_pipe()) as server:
        loader = sp.DataLoader(server, AffineSet(server.proxy, n=40, kill_at=13), batch_size=2, num_workers=2,
                               multiprocessing_context="fork", timeout=60)
        start = time.monotonic()
        with pytest.raises(RuntimeError, match="(?i)worker"):
            for _ in loader:
                pass
        assert time.monotonic() - start < 60


def test_wrong_input_names_raise_in_the_loop():
    with sp.DALIServer(affine_pipe()) as server:
        loader = sp.DataLoader(server, AffineSet(server.proxy, bad_names=True), batch_size=2, num_workers=1,
                               multiprocessing_context="fork")
        with pytest.raises(ArgumentError, match="missing \\['y'\\], unknown \\['z'\\]"):
            next(iter(loader))


def test_batch_larger_than_pipeline_batch_size():
    with sp.DALIServer(affine_pipe()) as server:
        loader = sp.DataLoader(server, AffineSet(server.proxy), batch_size=5)
        with pytest.raises(ArgumentError, match="batch_size 4"):
            next(iter(loader))


@pipeline_def(batch_size=4, num_threads=2, device_id=None)
def decode_pipe(device="cpu"):
    jpegs = fn.external_source(name="jpeg")
    return fn.decoders.image(jpegs, device=device)


def _encoded(i, fmt="PNG"):
    """A constant-colour 8x8 image of value 20*i, encoded with Pillow (PNG: lossless)."""
    from PIL import Image

    arr = np.full((8, 8, 3), 20 * i, np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format=fmt, quality=95)
    return np.frombuffer(buf.getvalue(), np.uint8)


class ImageSet(Dataset):
    def __init__(self, proxy, corrupt_at=None, fmt="PNG"):
        self.proxy, self.corrupt_at, self.fmt = proxy, corrupt_at, fmt

    def __len__(self):
        return 8

    def __getitem__(self, i):
        data = _encoded(i, self.fmt) if i != self.corrupt_at else \
            np.frombuffer(b"\x89PNG\r\n\x1a\nbroken", np.uint8)
        return self.proxy(jpeg=data), i


def test_pipeline_error_reaches_the_loop_and_later_batches_fail_too():
    with sp.DALIServer(decode_pipe()) as server:
        loader = sp.DataLoader(server, ImageSet(server.proxy, corrupt_at=5), batch_size=2, num_workers=2,
                               multiprocessing_context="fork", deterministic=True)
        it = iter(loader)
        images, idx = next(it)
        assert images.shape == (2, 8, 8, 3) and images[1, 0, 0, 0].item() == 20
        next(it)
        with pytest.raises(PipelineError, match="decoders.image"):
            next(it)
        with pytest.raises(PipelineError):
            next(it)


def test_clean_shutdown():
    """Batches pending at stop() either finish or fail; later ones fail; nothing hangs."""
    server = sp.DALIServer(affine_pipe()).start()
    ds = AffineSet(server.proxy, n=2)
    pending = [server.schedule(collate_list(ds)) for _ in range(5)]
    server.stop()
    for p in pending:
        try:
            check_batches([p.result()], 2)
        except PipelineError as e:
            assert "stopped" in str(e)
    with pytest.raises(PipelineError, match="stopped"):
        server.produce_data(collate_list(ds))
    with server:  # start again
        check_batches([server.produce_data(collate_list(ds))], 2)


def collate_list(ds):
    return sp.collate([ds[i] for i in range(len(ds))])


def test_server_needs_named_inputs():
    @pipeline_def(batch_size=2, device_id=None)
    def no_inputs():
        return fn.random.uniform()

    with pytest.raises(ArgumentError, match="external_source"):
        sp.DALIServer(no_inputs())


# ---- the video-clip example: encoded bytes plus an explicit frame list per sample ---------------------------
def _clip_frames(i, num_frames=24):
    """Frames sampled at different rates per segment: every frame at the start, every 3rd later."""
    first = list(range(i, i + 4))
    second = list(range(i + 6, num_frames, 3))[:4]
    return np.array(first + second, np.int64)


class ClipSet(Dataset):
    def __init__(self, paths, proxy):
        self.paths, self.proxy = paths, proxy

    def __len__(self):
        return 4

    def __getitem__(self, i):
        data = np.fromfile(self.paths[i % len(self.paths)], np.uint8)
        return {"clip": self.proxy(video=data, frames=_clip_frames(i)), "index": i}


@pipeline_def(batch_size=2, num_threads=2, device_id=None)
def clip_pipe(device="cpu"):
    video = fn.external_source(name="video")
    frames = fn.external_source(name="frames")
    return fn.decoders.video(video, frames=frames, device=device)


@pytest.fixture(scope="module")
def clip_files(tmp_path_factory):
    pytest.importorskip("av")
    from sluice.backends.video.barcode import write_barcode_video

    root = tmp_path_factory.mktemp("clips")
    paths = [str(root / f"v{k}.mp4") for k in range(2)]
    for p in paths:
        write_barcode_video(p, num_frames=24, width=64, height=48)
    return paths


def _check_clips(loader):
    from sluice.backends.video.barcode import read_barcodes

    count = 0
    for batch in loader:
        clips = batch["clip"]
        assert clips.dim() == 5 and clips.shape[1] == 8  # N F H W C
        for clip, i in zip(clips.cpu(), batch["index"].tolist()):
            assert read_barcodes(clip.numpy()) == _clip_frames(i).tolist()
            count += 1
    assert count == 4


def test_video_clip_dataset_cpu(clip_files):
    with sp.DALIServer(clip_pipe()) as server:
        _check_clips(sp.DataLoader(server, ClipSet(clip_files, server.proxy), batch_size=2, num_workers=2,
                                   multiprocessing_context="fork"))


@pytest.mark.cuda
def test_video_clip_dataset_mixed(clip_files):
    with sp.DALIServer(clip_pipe(device="mixed", device_id=0)) as server:
        loader = sp.DataLoader(server, ClipSet(clip_files, server.proxy), batch_size=2, num_workers=2,
                               multiprocessing_context="spawn")
        first = next(iter(loader))
        assert first["clip"].is_cuda
        _check_clips(loader)


@pytest.mark.parametrize("fmt,tol", [("JPEG", 2), ("PNG", 0)])
def test_image_proxy_decoders(device, fmt, tol):
    """The CPU decoder, and on a GPU the mixed one (nvJPEG for JPEG, its CPU fallback for PNG), behind the proxy;
    Pillow made the images."""
    pipe = decode_pipe(device="mixed", device_id=0) if device == "gpu" else decode_pipe()
    with sp.DALIServer(pipe) as server:
        loader = sp.DataLoader(server, ImageSet(server.proxy, fmt=fmt), batch_size=4, num_workers=2,
                               multiprocessing_context="fork", deterministic=True)
        for images, idx in loader:
            assert images.is_cuda == (device == "gpu") and images.shape == (4, 8, 8, 3)
            want = torch.tensor([20 * i for i in idx.tolist()], dtype=torch.int16)
            got = images[:, 4, 4, :].cpu().to(torch.int16)
            assert (got - want[:, None]).abs().max().item() <= tol


@pipeline_def(batch_size=4, num_threads=2, device_id=None, seed=9)
def noisy_pipe():
    x = fn.external_source(name="x")
    y = fn.external_source(name="y")
    return x + fn.random.uniform(range=[0.0, 1.0], shape=[3]), y


def test_deterministic_mode_repeats_augmentations():
    """deterministic=True: with a seeded pipeline, two runs with workers give identical (random) outputs, and
    different batches get different random values."""
    runs = []
    for _ in range(2):
        with sp.DALIServer(noisy_pipe()) as server:
            loader = sp.DataLoader(server, AffineSet(server.proxy, n=8), batch_size=2, num_workers=2,
                                   multiprocessing_context="fork", deterministic=True)
            # out = x + noise with x = [i, i+1, i+2]; the second output is y = i
            runs.append([b["out"] - (b["index"][:, None] + torch.arange(3)).float() for b in loader])
            assert all(torch.equal(b["x"], b["index"].float()) for b in loader)
    for a, b in zip(*runs):
        assert torch.equal(a, b)
    noise = torch.cat(runs[0])
    assert ((noise >= 0) & (noise < 1)).all()
    assert len({tuple(row.tolist()) for row in noise}) == len(noise)


class RaggedSet(Dataset):
    def __init__(self, proxy):
        self.proxy = proxy

    def __len__(self):
        return 4

    def __getitem__(self, i):
        return self.proxy(v=np.arange(i + 1, dtype=np.int32)), i


@pipeline_def(batch_size=2, num_threads=1, device_id=None)
def ragged_pipe():
    return fn.external_source(name="v") * 3


def test_ragged_outputs_as_lists():
    with sp.DALIServer(ragged_pipe()) as server:
        with pytest.raises(PipelineError, match="output 0.*different shapes"):
            next(iter(sp.DataLoader(server, RaggedSet(server.proxy), batch_size=2)))
    with sp.DALIServer(ragged_pipe(), ragged_outputs=[0]) as server:
        for values, idx in sp.DataLoader(server, RaggedSet(server.proxy), batch_size=2):
            assert [v.tolist() for v in values] == [list(range(0, 3 * (i + 1), 3)) for i in idx.tolist()]
