"""fn.decoders.numpy against ``np.save`` / ``np.load`` (C and Fortran order, every numeric type, big-endian, a
ragged batch, ``dtype`` casts) and fn.decoders.inflate against the ``lz4`` package's block compressor and the
standard library's zlib (single chunks, chunked sequences by sizes or offsets, the layout's sequence axis)."""

import io
import zlib

import numpy as np
import pytest
import torch

from sluice import types
from sluice.testing import run_op


def _lz4():
    """The ``lz4`` package's block codec (the 'lz4' extra): the tests that need it skip without it."""
    return pytest.importorskip("lz4.block")

RNG = np.random.default_rng(11)


def _npy(a: np.ndarray) -> np.ndarray:
    buf = io.BytesIO()
    np.save(buf, a)
    return np.frombuffer(buf.getvalue(), np.uint8).copy()


@pytest.mark.parametrize("dtype", ["u1", "i2", "<u2", "i4", "f2", "<f4", ">f4", "f8", "i8", "?"])
def test_decoders_numpy_equals_np_load(dtype):
    arrays = [RNG.normal(10, 5, s).astype(dtype) for s in ((3, 4), (5, 2), (1, 7))]
    arrays[1] = np.asfortranarray(arrays[1])
    out = run_op("decoders.numpy", [_npy(a) for a in arrays])
    for a, got in zip(arrays, out):
        ref = np.load(io.BytesIO(_npy(a).tobytes()))
        assert got.shape == ref.shape
        np.testing.assert_array_equal(got.numpy(), ref.astype(ref.dtype.newbyteorder("=")))


def test_decoders_numpy_casts_and_checks():
    arrays = [np.arange(6, dtype=np.int16).reshape(2, 3), np.arange(4, dtype=np.float64).reshape(1, 4) / 2]
    out = run_op("decoders.numpy", [_npy(a) for a in arrays], dtype=types.FLOAT)
    assert out[0].dtype == torch.float32
    np.testing.assert_array_equal(out[1].numpy(), arrays[1].astype(np.float32))
    with pytest.raises(Exception, match="differ in type"):
        run_op("decoders.numpy", [_npy(a) for a in arrays])
    with pytest.raises(Exception, match="differ in rank"):
        run_op("decoders.numpy", [_npy(np.zeros(3)), _npy(np.zeros((1, 3)))])
    with pytest.raises(Exception, match="not a .npy file"):
        run_op("decoders.numpy", [np.frombuffer(b"hello world, not numpy", np.uint8).copy()])
    scalar = run_op("decoders.numpy", [_npy(np.float32(3.5))])
    assert scalar[0].shape == () and float(scalar[0]) == 3.5


def _frames(k, shape=(4, 5, 3)):
    return [RNG.integers(0, 40, shape, dtype=np.uint8) for _ in range(k)]  # low entropy: compresses


def test_inflate_lz4_single_chunks_and_types():
    arrays = [RNG.integers(0, 5, (6, 7), dtype=np.int32) for _ in range(3)]
    data = [np.frombuffer(_lz4().compress(a.tobytes(), store_size=False), np.uint8).copy() for a in arrays]
    out = run_op("decoders.inflate", data, shape=[6, 7], dtype=types.INT32, layout="HW", input_layout="")
    assert out.layout() == "HW"
    for a, got in zip(arrays, out):
        np.testing.assert_array_equal(got.numpy(), a)


@pytest.mark.parametrize("by", ["sizes", "offsets"])
def test_inflate_chunked_sequences(by):
    clips = [_frames(3), _frames(1), _frames(2)]
    samples, sizes, offsets = [], [], []
    for clip in clips:
        parts = [_lz4().compress(f.tobytes(), store_size=False) for f in clip]
        samples.append(np.frombuffer(b"".join(parts), np.uint8).copy())
        sizes.append(np.array([len(p) for p in parts], np.int32))
        offsets.append(np.concatenate([[0], np.cumsum(sizes[-1])[:-1]]).astype(np.int32))
    from sluice import fn
    from sluice.testing import run_pipeline

    def build():
        x = fn.external_source(source=lambda: samples, cycle=True)
        c = fn.external_source(source=lambda: sizes if by == "sizes" else offsets, cycle=True)
        kw = {"chunk_sizes": c} if by == "sizes" else {"chunk_offsets": c}
        return fn.decoders.inflate(x, shape=[4, 5, 3], layout="HWC", **kw)

    (out,) = run_pipeline(build, batch_size=3)
    assert out.layout() == "FHWC"
    for clip, got in zip(clips, out):
        np.testing.assert_array_equal(got.numpy(), np.stack(clip))


def test_inflate_deflate_streams_and_errors():
    arrays = [RNG.integers(0, 3, (5, 5), dtype=np.uint8) for _ in range(3)]
    raw = zlib.compressobj(wbits=-15)
    streams = [zlib.compress(arrays[0].tobytes()), raw.compress(arrays[1].tobytes()) + raw.flush(),
               zlib.compress(arrays[2].tobytes(), wbits=31)]  # zlib, raw deflate, gzip
    out = run_op("decoders.inflate", [np.frombuffer(s, np.uint8).copy() for s in streams], shape=[5, 5],
                 algorithm="DEFLATE")
    for a, got in zip(arrays, out):
        np.testing.assert_array_equal(got.numpy(), a)
    with pytest.raises(Exception, match="inflates to"):
        run_op("decoders.inflate", [np.frombuffer(streams[0], np.uint8).copy()], shape=[5, 6], algorithm="DEFLATE")
    with pytest.raises(Exception, match="algorithm"):
        run_op("decoders.inflate", [np.zeros(4, np.uint8)], shape=[4], algorithm="ZSTD")


@pytest.mark.cuda
def test_inflate_gpu_equals_cpu():
    clip = _frames(2)
    data = [np.frombuffer(_lz4().compress(f.tobytes(), store_size=False), np.uint8).copy() for f in clip]
    c = run_op("decoders.inflate", data, shape=[4, 5, 3])
    g = run_op("decoders.inflate", data, shape=[4, 5, 3], device="gpu")
    assert g.device == "gpu"
    for a, b in zip(c, g.as_cpu()):
        assert torch.equal(a, b)
