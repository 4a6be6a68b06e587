"""fn.readers.numpy against numpy.load of the same files: whole arrays in C and Fortran order and other byte
orders, regions of interest (absolute, relative, per sample, padded, trimmed) equal to NumPy's slices and read
without the rest of the file, bad files named in errors, and device='gpu'."""

import numpy as np
import pytest
import torch

import sluice
from sluice import fn
from sluice.errors import PipelineError
from sluice.ops.readers import _base as readers_base


@pytest.fixture
def arrays(tmp_path):
    rng = np.random.default_rng(0)
    made = {
        "c_int32": rng.integers(-1000, 1000, (6, 7, 5)).astype(np.int32),
        "fortran": np.asfortranarray(rng.integers(-1000, 1000, (6, 7, 5)).astype(np.int32)),
        "big_endian": rng.integers(-1000, 1000, (6, 7, 5)).astype(">i4"),
        "wide": rng.integers(-1000, 1000, (6, 7, 5)).astype(np.int32),
    }
    for name, a in made.items():
        np.save(tmp_path / f"{name}.npy", a)
    (tmp_path / "notes.txt").write_text("not an array")
    return tmp_path, [np.load(tmp_path / f"{n}.npy") for n in sorted(made)]


def run_numpy(batch_size, device="cpu", **kw):
    @sluice.pipeline_def(batch_size=batch_size, num_threads=2, device_id=0 if device == "gpu" else None, seed=1,
                         exec_async=False)  # no batch read ahead: test_a_region_reads_only_its_bytes counts reads
    def pipe():
        return fn.readers.numpy(device=device, name="R", **kw)

    return pipe().run()[0]


def test_whole_arrays_equal_numpy_load(arrays):
    root, ref = arrays
    out = run_numpy(4, file_root=str(root))
    assert out.packed is not None and out.dtype == torch.int32
    for got, want in zip(out, ref):
        assert got.numpy().dtype == np.int32 and np.array_equal(got.numpy(), want)


@pytest.mark.parametrize("roi, slicer", [
    (dict(roi_start=[1, 2, 0], roi_end=[4, 5, 5]), np.s_[1:4, 2:5, 0:5]),        # whole rows: a few runs
    (dict(roi_start=[1, 2, 1], roi_end=[4, 5, 3]), np.s_[1:4, 2:5, 1:3]),        # partial rows
    (dict(roi_start=[2], roi_shape=[3], roi_axes=[1]), np.s_[:, 2:5]),
    (dict(rel_roi_start=[0.5], rel_roi_shape=[0.5], roi_axes=[0]), np.s_[3:6]),
    (dict(rel_roi_start=[0.2, 0.0, 0.4], rel_roi_end=[0.8, 1.0, 1.0]), np.s_[1:5, 0:7, 2:5]),
])
def test_regions_equal_numpy_slices(arrays, roi, slicer):
    root, ref = arrays
    out = run_numpy(4, file_root=str(root), **roi)
    for got, want in zip(out, ref):
        assert np.array_equal(got.numpy(), want[slicer])


def test_out_of_bounds_policies(arrays):
    root, ref = arrays
    out = run_numpy(4, file_root=str(root), roi_start=[-1, 0, 3], roi_shape=[3, 2, 4], out_of_bounds_policy="pad",
                    fill_value=-7)
    for got, want in zip(out, ref):
        expected = np.full((3, 2, 4), -7, np.int32)
        expected[1:, :, :2] = want[0:2, 0:2, 3:5]
        assert np.array_equal(got.numpy(), expected)
    out = run_numpy(4, file_root=str(root), roi_start=[4, 0, 0], roi_end=[9, 2, 2],
                    out_of_bounds_policy="trim_to_shape")
    assert all(np.array_equal(g.numpy(), w[4:, 0:2, 0:2]) for g, w in zip(out, ref))
    with pytest.raises(PipelineError, match=r"big_endian.npy.*region of interest from \[4, 0, 0\] to \[9, 2, 2\].*"
                                            "reaches outside its array of shape"):
        run_numpy(4, file_root=str(root), roi_start=[4, 0, 0], roi_end=[9, 2, 2])


def test_regions_per_sample(arrays):
    root, ref = arrays
    starts = [np.array([k, 0, 0], np.int64) for k in range(4)]

    @sluice.pipeline_def(batch_size=4, num_threads=2, device_id=None)
    def pipe():
        start = fn.external_source(source=lambda: starts)
        return fn.readers.numpy(file_root=str(root), roi_start=start, roi_shape=[2, 3, 5])

    out = pipe().run()[0]
    for k, (got, want) in enumerate(zip(out, ref)):
        assert np.array_equal(got.numpy(), want[k:k + 2, 0:3])


def test_a_region_reads_only_its_bytes(tmp_path, monkeypatch):
    big = np.arange(200 * 300 * 4, dtype=np.float32).reshape(200, 300, 4)
    np.save(tmp_path / "big.npy", big)
    requested = []
    real = readers_base._read_local  # every local byte range a reader reads goes through it

    def spy(files, file_index, starts, sizes, offsets, out, pool):
        if all(files[f].endswith("big.npy") for f in file_index):  # (pipelines of other tests may still read ahead)
            requested.append(int(np.sum(sizes)))
        return real(files, file_index, starts, sizes, offsets, out, pool)

    monkeypatch.setattr(readers_base, "_read_local", spy)
    out = run_numpy(1, files=[str(tmp_path / "big.npy")], roi_start=[10, 20], roi_end=[30, 60], roi_axes=[0, 1])
    assert np.array_equal(out[0].numpy(), big[10:30, 20:60])
    data_read = sum(requested) - min(4096, (tmp_path / "big.npy").stat().st_size)  # minus the header read
    assert data_read == 20 * 40 * 4 * 4  # exactly the region's rows, not the 960 KB file


def test_file_list_files_and_filter(arrays):
    root, ref = arrays
    (root / "list.txt").write_text("wide.npy\nc_int32.npy\n")
    out = run_numpy(2, file_list=str(root / "list.txt"))
    assert np.array_equal(out[0].numpy(), ref[3]) and np.array_equal(out[1].numpy(), ref[1])
    out = run_numpy(1, file_root=str(root), files=["fortran.npy"])
    assert np.array_equal(out[0].numpy(), ref[2])
    out = run_numpy(2, file_root=str(root), file_filter="[bf]*.npy")
    assert np.array_equal(out[0].numpy(), ref[0]) and np.array_equal(out[1].numpy(), ref[2])


def test_lying_header_and_bad_files_are_named(tmp_path):
    a = np.arange(100, dtype=np.int64).reshape(10, 10)
    np.save(tmp_path / "a.npy", a)
    data = (tmp_path / "a.npy").read_bytes()
    (tmp_path / "b_lying.npy").write_bytes(data.replace(b"(10, 10)", b"(20, 10)"))
    with pytest.raises(PipelineError, match=r"b_lying.npy'.*announces a int64 array of shape \(20, 10\) \(1600 "
                                            r"bytes of data\) but the file holds 800"):
        run_numpy(2, file_root=str(tmp_path))
    (tmp_path / "b_lying.npy").write_bytes(b"garbage" * 20)
    with pytest.raises(PipelineError, match="b_lying.npy' is not a .npy file"):
        run_numpy(2, file_root=str(tmp_path))
    (tmp_path / "b_lying.npy").write_bytes(data.replace(b"'<i8'", b"'|O8'"))
    with pytest.raises(PipelineError, match="b_lying.npy'.*does not parse|b_lying.npy'.*cannot be read"):
        run_numpy(2, file_root=str(tmp_path))
    np.save(tmp_path / "b_lying.npy", a.astype(np.float32))
    with pytest.raises(PipelineError, match="one type: .*a.npy' holds int64, .*b_lying.npy' holds float32"):
        run_numpy(2, file_root=str(tmp_path))


def test_sharding_and_checkpoint_state(arrays):
    root, ref = arrays
    got = [run_numpy(2, file_root=str(root), shard_id=s, num_shards=2) for s in range(2)]
    assert np.array_equal(got[0][1].numpy(), ref[1]) and np.array_equal(got[1][0].numpy(), ref[2])


@pytest.mark.cuda
def test_gpu_reader_equals_cpu(arrays):
    root, ref = arrays
    out = run_numpy(4, device="gpu", file_root=str(root), roi_start=[1, 0, 1], roi_end=[5, 7, 4])
    assert out.device == "gpu" and out.packed is not None
    for got, want in zip(out, ref):
        assert got.is_cuda and np.array_equal(got.cpu().numpy(), want[1:5, :, 1:4])


@pytest.mark.cuda
def test_gpu_reader_beside_a_cpu_stage(arrays):
    """With a CPU stage in the pipeline the batch is read there (prepare) and only copied on the GPU stage."""
    root, ref = arrays

    @sluice.pipeline_def(batch_size=4, num_threads=2, device_id=0)
    def pipe():
        noise = fn.random.uniform(shape=[1])
        return fn.readers.numpy(file_root=str(root), device="gpu"), noise

    p = pipe()
    for _ in range(3):
        out, _ = p.run()
        assert all(np.array_equal(g.cpu().numpy(), w) for g, w in zip(out, ref))
