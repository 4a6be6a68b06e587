"""fn.experimental.readers.fits on FITS files the test writes by the FITS 4.0 standard (80-character cards in
2880-byte blocks, big-endian data in Fortran order, BZERO / BSCALE): the primary and extension image HDUs of every
BITPIX come back as the arrays written, the unsigned conventions as uint types, scaled data as float32, binary
tables skipped over, tile-compressed images and non-image HDUs refused by name."""

import numpy as np
import pytest
import torch

from sluice import fn

BLOCK = 2880


def _card(key, value=None):
    if value is None:
        text = key
    elif isinstance(value, str):
        text = f"{key:<8}= '{value:<8}'"
    elif isinstance(value, bool):
        text = f"{key:<8}= {'T' if value else 'F':>20}"
    else:
        text = f"{key:<8}= {value!s:>20}"
    return text.ljust(80).encode()


def _hdu(cards, data: bytes = b""):
    head = b"".join(_card(k, v) for k, v in cards) + _card("END")
    head += b" " * (-len(head) % BLOCK)
    return head + data + b"\0" * (-len(data) % BLOCK)


def image_hdu(arr, primary=False, bzero=None, bscale=None, stored=None):
    stored = arr if stored is None else stored
    bitpix = {"u1": 8, "i2": 16, "i4": 32, "i8": 64, "f4": -32, "f8": -64}[stored.dtype.str[1:]]
    cards = [("SIMPLE", True) if primary else ("XTENSION", "IMAGE"), ("BITPIX", bitpix), ("NAXIS", stored.ndim)]
    cards += [(f"NAXIS{i + 1}", n) for i, n in enumerate(stored.shape[::-1])]
    if not primary:
        cards += [("PCOUNT", 0), ("GCOUNT", 1)]
    if bzero is not None:
        cards.append(("BZERO", bzero))
    if bscale is not None:
        cards.append(("BSCALE", bscale))
    return _hdu(cards, stored.astype(stored.dtype.newbyteorder(">")).tobytes())


def table_hdu(rows=3, compressed=False):
    cards = [("XTENSION", "BINTABLE"), ("BITPIX", 8), ("NAXIS", 2), ("NAXIS1", 4), ("NAXIS2", rows),
             ("PCOUNT", 0), ("GCOUNT", 1), ("TFIELDS", 1), ("TFORM1", "1J")]
    if compressed:
        cards.append(("ZIMAGE", True))
    return _hdu(cards, bytes(range(4 * rows)))


def empty_primary():
    return _hdu([("SIMPLE", True), ("BITPIX", 8), ("NAXIS", 0), ("EXTEND", True)])


def _read(tmp_path, n, **kw):
    from sluice.pipeline.pipeline import Pipeline

    pipe = Pipeline(batch_size=n, num_threads=2, device_id=None, seed=1)
    with pipe:
        out = fn.experimental.readers.fits(file_root=str(tmp_path), **kw)
    pipe.set_outputs(*(out if isinstance(out, (list, tuple)) else [out]))
    got = pipe.run()
    pipe.close()
    return got


@pytest.mark.parametrize("dtype", ["u1", "i2", "i4", "i8", "f4", "f8"])
def test_every_bitpix_in_the_first_extension(tmp_path, dtype):
    rng = np.random.default_rng(1)
    arrays = [(rng.normal(50, 20, s)).astype(dtype) for s in ((3, 5), (4, 6))]
    for i, a in enumerate(arrays):
        (tmp_path / f"{i}.fits").write_bytes(empty_primary() + image_hdu(a))
    (out,) = _read(tmp_path, 2)
    for a, got in zip(arrays, out):
        assert got.shape == a.shape
        np.testing.assert_array_equal(got.numpy(), a)


def test_primary_and_several_hdus_past_a_table(tmp_path):
    a = np.arange(12, dtype=np.int16).reshape(3, 4)
    b = np.arange(6, dtype=np.float32).reshape(2, 3) / 4
    (tmp_path / "x.fits").write_bytes(image_hdu(a, primary=True) + table_hdu() + image_hdu(b))
    first, third = _read(tmp_path, 1, hdu_indices=[1, 3], dtypes=["INT16", "FLOAT"])
    np.testing.assert_array_equal(first[0].numpy(), a)
    np.testing.assert_array_equal(third[0].numpy(), b)
    with pytest.raises(Exception, match="HDU 2 is not an image HDU"):
        _read(tmp_path, 1, hdu_indices=[2])
    with pytest.raises(Exception, match="has 3 HDUs"):
        _read(tmp_path, 1, hdu_indices=[5])
    with pytest.raises(Exception, match="not the"):
        _read(tmp_path, 1, hdu_indices=[1], dtypes=["FLOAT"])


def test_unsigned_conventions_and_scaling(tmp_path):
    u16 = np.array([[0, 1, 40000, 65535]], np.uint16)
    stored16 = (u16.astype(np.int32) - 32768).astype(np.int16)
    (tmp_path / "a.fits").write_bytes(empty_primary() + image_hdu(u16, bzero=32768, stored=stored16) +
                                      image_hdu(np.array([[1, 2]], np.int16), bzero=10.0, bscale=0.5) +
                                      image_hdu(np.array([0, 127, 128, 255], np.uint8), bzero=-128))
    u, scaled, i8 = _read(tmp_path, 1, hdu_indices=[2, 3, 4])
    assert u[0].dtype == torch.uint16 and u[0].numpy().tolist() == u16.tolist()
    assert scaled[0].dtype == torch.float32 and scaled[0].tolist() == [[10.5, 11.0]]
    assert i8[0].dtype == torch.int8 and i8[0].tolist() == [-128, -1, 0, 127]


def test_compressed_images_and_non_fits_files_are_named(tmp_path):
    (tmp_path / "c.fits").write_bytes(empty_primary() + table_hdu(compressed=True))
    with pytest.raises(Exception, match="c.fits.*tile-compressed"):
        _read(tmp_path, 1)
    (tmp_path / "c.fits").write_bytes(b"NOT A FITS FILE" * 300)
    with pytest.raises(Exception, match="not a FITS file"):
        _read(tmp_path, 1)


@pytest.mark.cuda
def test_gpu_reader_equals_cpu(tmp_path):
    from sluice.pipeline.pipeline import Pipeline

    for i in range(3):
        (tmp_path / f"{i}.fits").write_bytes(empty_primary() + image_hdu(np.full((4, 5), i, np.int32)))
    cpu = _read(tmp_path, 3)[0]
    pipe = Pipeline(batch_size=3, num_threads=2, device_id=0, seed=1)
    with pipe:
        out = fn.experimental.readers.fits(file_root=str(tmp_path), device="gpu")
    pipe.set_outputs(out)
    (gpu,) = pipe.run()
    pipe.close()
    assert gpu.device == "gpu"
    for a, b in zip(cpu, gpu.as_cpu()):
        assert torch.equal(a, b)
