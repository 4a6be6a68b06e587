"""sluice.torch.proxy with DALI's calling conventions: ``DALIServer(pipeline, deterministic=...)`` and
``server.proxy(a, b)`` by position, in DALI's order of the pipeline's external_source nodes (the graph walked from
the outputs, each operator's inputs first). References: NumPy arithmetic for the outputs, Pillow for decoded
images."""

from __future__ import annotations

import inspect
import io
import pickle

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import Dataset
from torch.utils.data.dataloader import default_collate

import sluice.torch.proxy as sp
from sluice import fn, pipeline_def
from sluice.errors import ArgumentError


@pipeline_def(batch_size=4, num_threads=2, device_id=None)
def sum_diff_pipe():
    """DALI's proxy example 2: a + b and a - b."""
    a = fn.external_source(name="a", no_copy=True)
    b = fn.external_source(name="b", no_copy=True)
    return a + b, a - b


@pipeline_def(batch_size=2, num_threads=1, device_id=None)
def reversed_names_pipe():
    """alpha is made first, but the output uses zeta first: DALI orders the inputs zeta, alpha (neither in the
    order of definition nor alphabetically)."""
    alpha = fn.external_source(name="alpha")
    zeta = fn.external_source(name="zeta")
    return zeta - alpha


@pytest.mark.parametrize("named", [True, False])
def test_dali_example_manual_collate(named):
    """DALI's DALIServer docstring, example 2: proxy by name or by position, torch's default_collate, then
    produce_data."""
    rng = np.random.default_rng(0)
    with sp.DALIServer(sum_diff_pipe()) as server:
        assert server.input_names == ["a", "b"]
        outs = []
        for _ in range(4):
            a = rng.random((3, 3), dtype=np.float32)
            b = rng.random((3, 3), dtype=np.float32)
            out0, out1 = server.proxy(a=a, b=b) if named else server.proxy(a, b)
            outs.append((a, b, out0, out1))
        a, b, a_plus_b, a_minus_b = server.produce_data(default_collate(outs))
    torch.testing.assert_close(a_plus_b, a + b, rtol=0, atol=0)
    torch.testing.assert_close(a_minus_b, a - b, rtol=0, atol=0)


def test_positions_follow_dalis_input_order():
    with sp.DALIServer(reversed_names_pipe()) as server:
        assert server.input_names == ["zeta", "alpha"]
        assert list(inspect.signature(server.proxy).parameters) == ["zeta", "alpha"]
        samples = [server.proxy(np.float32([5]), np.float32([2])),
                   server.proxy(np.float32([7]), alpha=np.float32([10]))]
        out = server.produce_data(default_collate(samples))
    assert out.flatten().tolist() == [3.0, -3.0]


def test_positional_errors():
    with sp.DALIServer(reversed_names_pipe()) as server:
        with pytest.raises(ArgumentError, match=r"2 external_source input\(s\) \['zeta', 'alpha'\].*got 3"):
            server.proxy(1, 2, 3)
        with pytest.raises(ArgumentError, match=r"\['zeta'\] both by position and by name"):
            server.proxy(1, zeta=2)
        with pytest.raises(ArgumentError, match=r"missing \['alpha'\]"):
            server.proxy(1)


def test_pickled_proxy_takes_positions():
    """What a spawned DataLoader worker receives (the server pickles to its proxy) binds positions the same way."""
    server = sp.DALIServer(reversed_names_pipe())
    proxy = pickle.loads(pickle.dumps(server)).proxy
    sample = proxy(np.float32([1]), np.float32([2]))
    assert sample.inputs == {"zeta": np.float32([1]), "alpha": np.float32([2])}
    assert list(inspect.signature(proxy).parameters) == ["zeta", "alpha"]


class PairSet(Dataset):
    def __init__(self, proxy, n=8):
        self.proxy, self.n = proxy, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.proxy(np.full(2, i, np.float32), np.float32([i, 1])), i


@pipeline_def(batch_size=2, num_threads=2, device_id=None, seed=3)
def noisy_sum_pipe():
    a = fn.external_source(name="a")
    b = fn.external_source(name="b")
    return a + b + fn.random.uniform(range=[0.0, 1.0], shape=[2])


def test_deterministic_on_the_server():
    """DALIServer(pipe, deterministic=True): the DataLoader yields in sampler order (its own deterministic= still
    overrides), and a seeded pipeline repeats its random values run after run."""
    runs = []
    for _ in range(2):
        with sp.DALIServer(noisy_sum_pipe(), deterministic=True) as server:
            assert server.deterministic
            loader = sp.DataLoader(server, PairSet(server.proxy), batch_size=2, num_workers=2,
                                   multiprocessing_context="fork")
            assert loader.in_order is True
            assert sp.DataLoader(server, PairSet(server.proxy), batch_size=2, num_workers=2,
                                 deterministic=False).in_order is False
            batches = list(loader)
            assert [idx.tolist() for _, idx in batches] == [[0, 1], [2, 3], [4, 5], [6, 7]]
            runs.append(torch.cat([out - torch.stack([2 * idx, idx + 1], 1).float() for out, idx in batches]))
    assert torch.equal(runs[0], runs[1])
    assert ((runs[0] >= 0) & (runs[0] < 1)).all()
    with sp.DALIServer(noisy_sum_pipe()) as server:
        assert server.deterministic is False
        assert sp.DataLoader(server, PairSet(server.proxy), batch_size=2, num_workers=2).in_order is False


@pipeline_def(batch_size=3, num_threads=2, device_id=None)
def file_pipe():
    """DALI's proxy example 1 (CPU): file paths from the Dataset, read and decoded by the pipeline."""
    paths = fn.external_source(name="images", no_copy=True)
    images = fn.decoders.image(fn.io.file.read(paths), device="cpu")
    return fn.resize(images, resize_x=8, resize_y=8)


class PathSet(Dataset):
    def __init__(self, files, transform):
        self.files, self.transform = files, transform

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        # DALI's example encodes the path as int8 (np.frombuffer(path.encode(), dtype=np.int8))
        return self.transform(np.frombuffer(str(self.files[i]).encode(), dtype=np.int8)), i


def test_file_paths_through_the_proxy(tmp_path):
    files = []
    for i in range(5):
        img = np.full((8, 8, 3), 40 * i, np.uint8)
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, format="PNG")
        files.append(tmp_path / f"img{i}.png")
        files[-1].write_bytes(buf.getvalue())
    with sp.DALIServer(file_pipe()) as server:
        loader = sp.DataLoader(server, PathSet(files, server.proxy), batch_size=3, num_workers=1)
        seen = []
        for images, idx in loader:
            for image, i in zip(images, idx.tolist()):
                np.testing.assert_array_equal(image.numpy(), np.asarray(Image.open(files[i]).convert("RGB")))
                seen.append(i)
    assert sorted(seen) == list(range(5))


def test_start_thread_and_stop_thread():
    """The lifecycle DALI's proxy documents besides the context manager (DALIServer.start_thread / stop_thread of
    nvidia/dali/plugin/pytorch/experimental/proxy): both may be called twice; stop_thread before start_thread does
    nothing; after stop_thread batches fail until start_thread."""
    server = sp.DALIServer(sum_diff_pipe())
    server.stop_thread()  # never started: nothing to stop
    server.start_thread()
    server.start_thread()
    a = np.ones((2, 2), np.float32)
    out = server.produce_data(default_collate([server.proxy(a=a * i, b=a) for i in range(4)]))
    assert out[0][:, 0, 0].tolist() == [1.0, 2.0, 3.0, 4.0] and out[1][:, 0, 0].tolist() == [-1.0, 0.0, 1.0, 2.0]
    server.stop_thread()
    server.stop_thread()
    with pytest.raises(Exception, match="stopped"):
        server.produce_data(default_collate([server.proxy(a=a, b=a)] * 4))
    server.start_thread()
    assert float(server.produce_data(default_collate([server.proxy(a=a, b=a)] * 4))[1][0, 0, 0]) == 0.0
    server.stop_thread()
