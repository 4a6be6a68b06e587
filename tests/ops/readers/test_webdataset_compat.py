"""fn.readers.webdataset against the webdataset library reading the same shards (its TarWriter writes them), DALI's
index formats, wids shard indexes, the index cache, and bad shards (each an error naming the shard and member)."""

import io
import json
import os
import pathlib
import tarfile

import numpy as np
import pytest
import torch
from _reader_data import write_shards

import sluice
from sluice import fn, native, types
from sluice.errors import PipelineError
from sluice.ops.readers.webdataset import build_index

wds = pytest.importorskip("webdataset")


def run_reader(batch_size=4, iterations=1, **kw):
    @sluice.pipeline_def(batch_size=batch_size, num_threads=2, device_id=None, seed=3)
    def pipe():
        out = fn.readers.webdataset(name="R", **kw)
        return tuple(out) if isinstance(out, (list, tuple)) else out

    p = pipe()
    batches = [p.run() for _ in range(iterations)]
    return p, batches


def as_bytes(batch):
    return [bytes(s.numpy().tobytes()) for s in batch]


def test_same_samples_as_webdataset(tmp_path):
    shards = write_shards(tmp_path, shards=3, per_shard=4)
    reference = list(wds.WebDataset(shards, shardshuffle=False))
    p, batches = run_reader(batch_size=12, paths=shards, ext=["jpg", "cls", "json"])
    jpgs, classes, jsons = batches[0]
    assert as_bytes(jpgs) == [r["jpg"] for r in reference]
    assert as_bytes(classes) == [r["cls"] for r in reference]
    assert as_bytes(jsons) == [r["json"] for r in reference]
    assert jpgs.source_info[5] == f"{shards[1]}:k1001.jpg"
    assert p.reader_meta("R")["epoch_size"] == 12
    # The batch lies back to back in one buffer, as readers.file's does: the image decoders take it whole.
    assert jpgs.packed is not None and classes.packed is not None


def test_labels_of_one_size_come_dense_and_the_twin_reads_the_same(tmp_path):
    """Members all of one size (one-digit cls labels) make one dense tensor, as readers.file's labels are (an
    iterator takes it whole); the jpgs stay a packed batch; the compiled core's batch read (every thread taking
    the next member) and the pure-Python twin give the same samples as webdataset, shuffled or not."""
    shards = write_shards(tmp_path, shards=3, per_shard=3)
    reference = {r["__key__"]: (r["jpg"], r["cls"]) for r in wds.WebDataset(shards, shardshuffle=False)}
    p, batches = run_reader(batch_size=9, paths=shards, ext=["jpg", "cls"], random_shuffle=True, initial_fill=4)
    jpgs, classes = batches[0]
    assert classes.dense is not None and classes.dense.shape == (9, 1) and jpgs.packed is not None
    got = [(s.split(":")[-1].split(".")[0], j, c) for s, j, c in zip(jpgs.source_info, as_bytes(jpgs),
                                                                       as_bytes(classes))]
    assert sorted(got) == sorted((k, j, c) for k, (j, c) in reference.items())
    with native.fallback():
        _, twin = run_reader(batch_size=9, paths=shards, ext=["jpg", "cls"], random_shuffle=True, initial_fill=4)
    assert as_bytes(twin[0][0]) == as_bytes(jpgs) and as_bytes(twin[0][1]) == as_bytes(classes)


def test_images_decode_like_pil(tmp_path):
    from PIL import Image

    shards = write_shards(tmp_path, shards=1, per_shard=3)

    @sluice.pipeline_def(batch_size=3, num_threads=2, device_id=None)
    def pipe():
        jpegs, cls = fn.readers.webdataset(paths=shards, ext=["jpg", "cls"])
        return fn.decoders.image(jpegs, device="cpu"), cls

    images, _ = pipe().run()
    for img, ref in zip(images, wds.WebDataset(shards, shardshuffle=False)):
        want = np.asarray(Image.open(io.BytesIO(ref["jpg"])).convert("RGB"))
        assert np.abs(img.numpy().astype(int) - want.astype(int)).max() <= 2  # libjpeg-turbo vs PIL's IDCT


def test_extension_sets_dtypes_and_case(tmp_path):
    def extra(s, i, sample):
        if i % 2:
            sample["png"] = sample.pop("jpg")
        sample["ids"] = np.arange(i + 1, dtype=np.int64).tobytes()
        sample["TXT"] = b"x" * i

    shards = write_shards(tmp_path, shards=1, per_shard=4, extra=extra)
    ref = list(wds.WebDataset(shards, shardshuffle=False))
    _, batches = run_reader(paths=shards, ext=["jpg;png", "ids", "txt"], dtypes=[types.UINT8, types.INT64,
                            types.UINT8], case_sensitive_extensions=False)
    images, ids, txt = batches[0]
    assert as_bytes(images) == [r.get("jpg", r.get("png")) for r in ref]
    assert ids.dtype == torch.int64 and [s.tolist() for s in ids] == [list(range(i + 1)) for i in range(4)]
    assert [s.numel() for s in txt] == [0, 1, 2, 3]
    # Case-sensitive (the default): "txt" does not match "TXT", so the outputs are empty.
    _, batches = run_reader(paths=shards, ext=["txt"])
    assert [s.numel() for s in batches[0][0]] == [0, 0, 0, 0]


def test_missing_components(tmp_path):
    def extra(s, i, sample):
        if i == 2:
            del sample["cls"]

    shards = write_shards(tmp_path, shards=2, per_shard=3, extra=extra)
    _, batches = run_reader(batch_size=6, paths=shards, ext=["jpg", "cls"])
    assert [s.numel() for s in batches[0][1]].count(0) == 2  # 'empty' (the default)
    assert batches[0][1].source_info[2] == f"{shards[0]}:k0002.cls (missing)"
    p, batches = run_reader(batch_size=4, paths=shards, ext=["jpg", "cls"], missing_component_behavior="skip")
    assert p.reader_meta("R")["epoch_size"] == 4
    assert [int(bytes(s.numpy())) for s in batches[0][1]] == [0, 1, 3, 4]
    with pytest.raises(ValueError, match=r"sample 'k0002' of tar shard '.*shard-000.tar' has no 'cls' component"):
        run_reader(paths=shards, ext=["jpg", "cls"], missing_component_behavior="error")


def test_sharding_and_shuffling_cover_every_sample_once(tmp_path):
    shards = write_shards(tmp_path, shards=3, per_shard=5, jpg=False)
    seen = []
    for shard_id in range(2):
        p, batches = run_reader(batch_size=4, iterations=2, paths=shards, ext=["cls"], shard_id=shard_id,
                                num_shards=2, random_shuffle=True, initial_fill=3, pad_last_batch=True)
        got = [int(bytes(s.numpy())) for (b,) in batches for s in b]
        seen.append(got)
    assert sorted(set(seen[0])) == list(range(7)) and sorted(set(seen[1])) == list(range(7, 15))
    assert len(seen[0]) == 8 and seen[0].count(seen[0][-1]) >= 1  # padded with its last sample


def test_dali_index_files_v11_and_v12(tmp_path):
    shards = write_shards(tmp_path, shards=2, per_shard=3)
    v12 = []
    v11 = []
    for s in shards:
        text = build_index(s)
        p = tmp_path / (os.path.basename(s) + ".idx")
        p.write_text(text)
        v12.append(str(p))
        lines = text.splitlines()
        old = ["v1.1 " + lines[0].split()[1]] + [" ".join(f for k, f in enumerate(ln.split()) if k % 4 != 3)
                                                  for ln in lines[1:]]
        q = tmp_path / (os.path.basename(s) + ".v11.idx")
        q.write_text("\n".join(old) + "\n")
        v11.append(str(q))
    _, plain = run_reader(batch_size=6, paths=shards, ext=["jpg", "cls"])
    _, with12 = run_reader(batch_size=6, paths=shards, index_paths=v12, ext=["jpg", "cls"])
    _, with11 = run_reader(batch_size=6, paths=shards, index_paths=v11, ext=["jpg", "cls"])
    for got in (with12, with11):
        assert as_bytes(got[0][0]) == as_bytes(plain[0][0]) and as_bytes(got[0][1]) == as_bytes(plain[0][1])


@pytest.mark.parametrize("damage, message", [
    (lambda t: "v9 3\n" + t.split("\n", 1)[1], "first line should be 'v1.2 <samples>'"),
    (lambda t: t.replace("v1.2 3", "v1.2 4"), "announces 4 samples, it lists 3"),
    (lambda t: t.replace("\ncls ", "\ncls x", 1), "non-integer offset"),
    (lambda t: t.rsplit(" ", 1)[0] + "\n", "groups of 4 fields"),
    (lambda t: t.replace("\ncls ", "\ncls 99999999", 1), "past the end of the shard"),
])
def test_broken_index_is_an_error_naming_it(tmp_path, damage, message):
    shards = write_shards(tmp_path, shards=1, per_shard=3)
    idx = tmp_path / "broken.idx"
    idx.write_text(damage(build_index(shards[0])))
    with pytest.raises(ValueError, match=message) as e:
        run_reader(paths=shards, index_paths=[str(idx)], ext=["jpg", "cls"])
    assert "broken.idx" in str(e.value)


def test_wids_shard_index(tmp_path):
    shards = write_shards(tmp_path / "data", shards=2, per_shard=3)
    desc = {"__kind__": "wids-shard-index-v1", "wids_version": 1,
            "shardlist": [{"url": f"data/{os.path.basename(s)}", "nsamples": 3} for s in shards]}
    (tmp_path / "index.json").write_text(json.dumps(desc))
    _, batches = run_reader(batch_size=6, paths=[str(tmp_path / "index.json")], ext=["cls"])
    assert [int(bytes(s.numpy())) for s in batches[0][0]] == list(range(6))
    desc["shardlist"][1]["nsamples"] = 4
    (tmp_path / "index.json").write_text(json.dumps(desc))
    with pytest.raises(ValueError, match="says shard .*shard-001.tar' holds 4 samples, but it holds 3"):
        run_reader(paths=[str(tmp_path / "index.json")], ext=["cls"])


def test_folder_of_shards_and_index_cache(tmp_path):
    shards = write_shards(tmp_path / "d", shards=2, per_shard=2, jpg=False)
    _, batches = run_reader(paths=[str(tmp_path / "d") + "/"], ext=["cls"])
    assert [int(bytes(s.numpy())) for s in batches[0][0]] == [0, 1, 2, 3]
    assert len(list(pathlib.Path(os.environ["SLUICE_CACHE"]).glob("webdataset/*.idx"))) == 2
    # A shard written again (new size and time) is indexed again, not read with its stale index.
    write_shards(tmp_path / "d", shards=1, per_shard=3, jpg=False)
    _, batches = run_reader(batch_size=5, paths=shards, ext=["cls"])
    assert [int(bytes(s.numpy())) for s in batches[0][0]] == [0, 1, 2, 2, 3]  # 3 samples now, then shard 1


def test_long_names_gnu_and_pax(tmp_path):
    deep = "d" * 60 + "/" + "e" * 70 + "/"
    for fmt in (tarfile.GNU_FORMAT, tarfile.PAX_FORMAT):
        path = tmp_path / f"long{fmt}.tar"
        with tarfile.open(path, "w", format=fmt) as tar:
            for i in range(3):
                for ext, data in (("bin", bytes([i]) * (700 + i)), ("cls", str(i).encode())):
                    info = tarfile.TarInfo(f"{deep}sample{i}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        _, batches = run_reader(batch_size=3, paths=[str(path)], ext=["bin", "cls"])
        assert [s.numel() for s in batches[0][0]] == [700, 701, 702]
        assert batches[0][1].source_info[2] == f"{path}:{deep}sample2.cls"


def _expect_error(shard, match):
    with pytest.raises((ValueError, PipelineError), match=match) as e:
        run_reader(paths=[shard], ext=["jpg", "cls"])
    assert os.path.basename(shard) in str(e.value)


def test_truncated_tar_names_shard_and_member(tmp_path):
    shard = write_shards(tmp_path, shards=1, per_shard=4)[0]
    data = open(shard, "rb").read()
    members = [(m.name, m.offset_data, m.size) for m in tarfile.open(shard)]
    name, offset, size = members[5]
    cut = tmp_path / "cut.tar"
    cut.write_bytes(data[: offset + size // 2])
    _expect_error(str(cut), f"truncated: member '{name}' needs bytes")
    at_boundary = tmp_path / "boundary.tar"  # cut after a whole member: the end-of-archive blocks are missing
    end = offset + -(-size // 512) * 512
    at_boundary.write_bytes(data[:end])
    _expect_error(str(at_boundary), f"truncated: it ends at byte {end} after member '{name}'")


def test_damaged_header_names_shard(tmp_path):
    shard = write_shards(tmp_path, shards=1, per_shard=3)[0]
    data = bytearray(open(shard, "rb").read())
    second = [m.offset for m in tarfile.open(shard)][2]
    data[second + 10] ^= 0xFF  # inside the name: the checksum no longer matches
    bad = tmp_path / "bad.tar"
    bad.write_bytes(bytes(data))
    _expect_error(str(bad), f"damaged: the header at byte {second} .* fails its checksum")


def test_shard_changed_after_indexing_is_an_error_not_a_short_sample(tmp_path):
    shard = write_shards(tmp_path, shards=1, per_shard=3)[0]
    idx = tmp_path / "s.idx"
    idx.write_text(build_index(shard))

    @sluice.pipeline_def(batch_size=3, num_threads=2, device_id=None)
    def pipe():
        return tuple(fn.readers.webdataset(paths=[shard], index_paths=[str(idx)], ext=["jpg", "cls"]))

    p = pipe()
    p.build()
    with open(shard, "r+b") as f:
        f.truncate(2000)
    with pytest.raises(PipelineError, match=r"shard-000.tar' ends before the end of the member"):
        p.run()


@pytest.mark.cuda
def test_gpu_pipeline_gets_one_page_locked_packed_batch(tmp_path):
    """Feeding the mixed image decoder, the jpg output lies back to back in one page-locked buffer (the decoder's
    fast lane takes it as it takes readers.file's), and decodes to what the CPU decoder gives."""
    from sluice.ops.readers.file import batch_region, is_page_locked_buffer

    shards = write_shards(tmp_path, shards=2, per_shard=4)

    @sluice.pipeline_def(batch_size=8, num_threads=2, device_id=0)
    def pipe():
        jpegs, cls = fn.readers.webdataset(paths=shards, ext=["jpg", "cls"])
        return fn.decoders.image(jpegs, device="mixed"), fn.decoders.image(jpegs, device="cpu"), jpegs, cls

    gpu, cpu, jpegs, cls = pipe().run()
    region = batch_region(jpegs)
    assert jpegs.packed is not None and region is not None and is_page_locked_buffer(region[0])
    for g, c in zip(gpu, cpu):
        assert g.is_cuda and g.shape == c.shape
        assert (g.cpu().int() - c.int()).abs().float().mean() < 2.0  # nvJPEG vs libjpeg-turbo IDCT
