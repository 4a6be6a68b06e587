"""fn.io.file.read: file paths as byte tensors in, the files' bytes out; compared with Python's own file reading
(pathlib.Path.read_bytes) exactly, and decoded images with Pillow."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

from sluice import fn, ops, pipeline_def
from sluice.errors import PipelineError
from sluice.testing import run_op


def _path_bytes(path, dtype=np.uint8) -> np.ndarray:
    return np.frombuffer(str(path).encode(), dtype=dtype)


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(5)
    sizes = {"a.bin": 1, "b.bin": 4097, "empty.bin": 0, "c d é.bin": 300}
    out = []
    for name, size in sizes.items():
        path = tmp_path / name
        path.write_bytes(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
        out.append(path)
    return out


def test_reads_each_file_exactly(files):
    out = run_op("io.file.read", [_path_bytes(p) for p in files])
    assert len(out) == len(files) and out.layout() == ""
    for i, path in enumerate(files):
        assert out[i].dtype == torch.uint8 and out[i].dim() == 1
        assert out[i].numpy().tobytes() == path.read_bytes(), path.name
    assert out.source_info == [str(p) for p in files]  # later errors name the file


def test_int8_paths_and_nul_padding(files):
    """DALI takes int8 paths too (its proxy example encodes them so) and ends a path at its first NUL byte."""
    padded = [np.concatenate([_path_bytes(p, np.int8), np.zeros(7, np.int8)]) for p in files[:2]]
    out = run_op("io.file.read", padded)
    assert [out[i].numpy().tobytes() for i in range(2)] == [p.read_bytes() for p in files[:2]]


def test_dali_arguments_accepted(files):
    out = run_op("io.file.read", [_path_bytes(files[1])], dont_use_mmap=True, use_o_direct=True)
    assert out[0].numpy().tobytes() == files[1].read_bytes()


def test_missing_file_is_named(tmp_path, files):
    missing = tmp_path / "nope.jpg"
    with pytest.raises(PipelineError, match="io.file.read") as err:
        run_op("io.file.read", [_path_bytes(files[0]), _path_bytes(missing)])
    assert str(missing) in str(err.value)


def test_directory_is_named(tmp_path):
    with pytest.raises(PipelineError, match="Is a directory") as err:
        run_op("io.file.read", [_path_bytes(tmp_path)])
    assert str(tmp_path) in str(err.value)


@pytest.mark.parametrize("sample, match", [
    (np.array([1.0, 2.0], np.float32), "uint8 or int8"),
    (np.zeros((2, 3), np.uint8), "1-D"),
    (np.zeros(0, np.uint8), "empty file path"),
])
def test_bad_paths_raise(sample, match):
    with pytest.raises(PipelineError, match=match):
        run_op("io.file.read", [sample])


def test_read_then_decode_names_a_corrupt_file(tmp_path):
    """The DALI pattern: paths from external_source, read, decoded; compared with Pillow, and a corrupt file
    named by the decoder's error."""
    img = (np.arange(12 * 16 * 3) % 251).astype(np.uint8).reshape(12, 16, 3)
    good, bad = tmp_path / "good.png", tmp_path / "bad.png"
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG")
    good.write_bytes(buf.getvalue())
    bad.write_bytes(buf.getvalue()[:40])

    def make(paths):
        @pipeline_def(batch_size=len(paths), num_threads=2, device_id=None, exec_async=False)
        def pipe():
            encoded = fn.external_source(source=lambda: [_path_bytes(p) for p in paths], cycle=True)
            return fn.decoders.image(ops.io.file.Read()(encoded), device="cpu")
        return pipe()

    (images,) = make([good, good]).run()
    np.testing.assert_array_equal(images.at(1), np.asarray(Image.open(good).convert("RGB")))
    with pytest.raises(PipelineError, match="bad.png"):
        make([good, bad]).run()


def test_namespace_and_signature():
    import inspect

    assert fn.io.file.read.__module__ == "sluice.fn.io.file"
    assert ops.io.file.Read.schema.name == "io.file.read"
    assert list(inspect.signature(fn.io.file.read).parameters)[:1] == ["filepaths"]
