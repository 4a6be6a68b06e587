"""Every reader on a real S3 endpoint on loopback (moto's server): listing and sharding, tar members and .npy
regions read by ranges, a server failing every third request (retries: nothing lost or duplicated), a stalled
or stopped server (a clear error naming the URL within the timeout, no hang), credentials from AWS files."""

import json
import time

import numpy as np
import pytest
from _reader_data import example, jpeg, upload, write_shards, write_tfrecord

import sluice
from sluice import fn
from sluice.backends import storage
from sluice.errors import PipelineError
from sluice.runtime import Runtime

pytestmark = pytest.mark.usefixtures("s3")


def run(pipe_fn, iterations=1, batch_size=4):
    @sluice.pipeline_def(batch_size=batch_size, num_threads=2, device_id=None, seed=9, exec_async=False)
    def pipe():
        out = pipe_fn()
        return tuple(out) if isinstance(out, (list, tuple)) else out

    p = pipe()
    return p, [p.run() for _ in range(iterations)]


def as_bytes(batch):
    return [bytes(s.numpy().tobytes()) for s in batch]


@pytest.fixture
def tree(tmp_path):
    """Class folders of JPEGs, as readers.file reads them."""
    for c in range(3):
        (tmp_path / "tree" / f"class_{c}").mkdir(parents=True)
        for i in range(3 + c):
            (tmp_path / "tree" / f"class_{c}" / f"{i}.jpg").write_bytes(jpeg(10 * c + i, 8, 8))
    return tmp_path / "tree"


def test_listing_and_sharding_match_the_local_folder(s3, tree):
    url = upload(s3, "listing", tree, "data/")
    _, local = run(lambda: fn.readers.file(file_root=str(tree)), batch_size=12)
    _, remote = run(lambda: fn.readers.file(file_root=url), batch_size=12)
    assert as_bytes(remote[0][0]) == as_bytes(local[0][0])
    assert remote[0][1].as_tensor().tolist() == local[0][1].as_tensor().tolist()
    assert remote[0][0].source_info[0] == "s3://listing/data/class_0/0.jpg"
    shards = []
    for shard_id in range(2):
        p, out = run(lambda s=shard_id: fn.readers.file(file_root=url, shard_id=s, num_shards=2, name="R"),
                     batch_size=6)
        shards.append(as_bytes(out[0][0]))
        assert p.reader_meta("R")["epoch_size"] == 12
    assert sorted(shards[0] + shards[1]) == sorted(as_bytes(local[0][0]))


def test_tar_shards_are_read_by_ranges(s3, s3_server, tmp_path):
    shards = write_shards(tmp_path / "wds", shards=2, per_shard=4)
    url = upload(s3, "shards", tmp_path / "wds")
    _, local = run(lambda: fn.readers.webdataset(paths=shards, ext=["jpg", "cls"]), batch_size=8)
    start = len(s3_server.log)
    _, remote = run(lambda: fn.readers.webdataset(paths=[url], ext=["jpg", "cls"]), batch_size=8)
    assert as_bytes(remote[0][0]) == as_bytes(local[0][0]) and as_bytes(remote[0][1]) == as_bytes(local[0][1])
    assert remote[0][0].source_info[0] == "s3://shards/shard-000.tar:k0000.jpg"
    gets = [(path, rng) for method, path, rng in s3_server.log[start:] if method == "GET" and path.endswith(".tar")]
    ranged = [r for _, r in gets if r]
    assert ranged and all(r.startswith("bytes=") for r in ranged)
    # The batch's members came from ranged reads, not whole-shard downloads: each shard was read whole at most
    # once (to index it, then cached).
    assert sum(1 for _, r in gets if r is None) <= 2


def test_a_server_failing_every_third_request_loses_and_repeats_nothing(s3, s3_server, tree, tmp_path):
    shards = write_shards(tmp_path / "wds", shards=2, per_shard=5, jpg=False)
    url = upload(s3, "flaky", tmp_path / "wds")
    files = upload(s3, "flaky", tree, "tree/")
    s3_server.fail_every = 3
    before = s3_server.failed
    _, out = run(lambda: fn.readers.webdataset(paths=[url], ext=["cls"]), iterations=5, batch_size=2)
    got = [int(bytes(s.numpy())) for (b,) in out for s in b]
    assert got == list(range(10))  # one epoch, in order: every sample once
    _, out = run(lambda: fn.readers.file(file_root=files), iterations=3, batch_size=4)
    s3_server.fail_every = 0
    _, clean = run(lambda: fn.readers.file(file_root=files), iterations=3, batch_size=4)
    assert [as_bytes(b[0]) for b in out] == [as_bytes(b[0]) for b in clean]
    assert s3_server.failed > before  # the faults did happen
    assert shards


def test_a_stalled_server_times_out_naming_the_url(s3, s3_server, tree, monkeypatch):
    url = upload(s3, "stall", tree, "t/")
    monkeypatch.setenv("SLUICE_S3_TIMEOUT", "0.5")
    monkeypatch.setenv("SLUICE_S3_RETRY_TIMEOUT", "1")
    monkeypatch.setenv("SLUICE_S3_RETRIES", "1")

    @sluice.pipeline_def(batch_size=4, num_threads=2, device_id=None)
    def pipe():
        return fn.readers.file(file_root=url)

    p = pipe()
    p.build()
    s3_server.stall = 2.0
    t = time.monotonic()
    # Any file of the batch may be the first whose request times out (the batch's reads run in parallel).
    with pytest.raises(PipelineError, match=r"cannot read 's3://stall/t/class_\d+/[^']*\.jpg'"):
        p.run()
    assert time.monotonic() - t < 10


def test_a_stopped_server_is_an_error_naming_the_url_not_a_hang(tree, monkeypatch):
    import boto3

    from sluice.testing import s3_server as serve

    monkeypatch.setenv("SLUICE_S3_TIMEOUT", "1")
    monkeypatch.setenv("SLUICE_S3_RETRY_TIMEOUT", "2")
    with serve() as server:
        monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint)
        client = boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1",
                              aws_access_key_id="testing", aws_secret_access_key="testing")
        url = upload(client, "gone", tree, "t/")

        @sluice.pipeline_def(batch_size=4, num_threads=2, device_id=None)
        def pipe():
            return fn.readers.file(file_root=url)

        p = pipe()
        p.run()
        server.stop()
        t = time.monotonic()
        with pytest.raises(PipelineError, match=r"cannot read 's3://gone/t/class_.*\.jpg'"):
            for _ in range(3):
                p.run()
        assert time.monotonic() - t < 15


def test_numpy_regions_by_ranges_and_lying_headers(s3, s3_server, tmp_path):
    a = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    (tmp_path / "np").mkdir()
    np.save(tmp_path / "np" / "a.npy", a)
    url = upload(s3, "arrays", tmp_path / "np")
    start = len(s3_server.log)
    _, out = run(lambda: fn.readers.numpy(file_root=url, roi_start=[10, 4], roi_end=[20, 12]), batch_size=1)
    assert np.array_equal(out[0][0][0].numpy(), a[10:20, 4:12])
    ranges = [r for m, p, r in s3_server.log[start:] if m == "GET" and p.endswith("a.npy")]
    assert ranges and all(r is not None for r in ranges)
    data = (tmp_path / "np" / "a.npy").read_bytes()
    s3.put_object(Bucket="arrays", Key="b.npy", Body=data.replace(b"(64, 32)", b"(99, 32)"))
    with pytest.raises(PipelineError, match=r"s3://arrays/b.npy'.*announces .* shape \(99, 32\)"):
        run(lambda: fn.readers.numpy(files=["s3://arrays/b.npy"]), batch_size=1)


def test_coco_tfrecord_and_nemo_from_urls(s3, tmp_path):
    import soundfile

    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "x.jpg").write_bytes(jpeg(1, 10, 12))
    (tmp_path / "c" / "ann.json").write_text(json.dumps({
        "images": [{"id": 1, "file_name": "x.jpg", "width": 12, "height": 10}],
        "annotations": [{"id": 1, "image_id": 1, "category_id": 5, "bbox": [1, 2, 3, 4]}],
        "categories": [{"id": 5}]}))
    sr = 8000
    tone = np.sin(np.arange(sr) / sr * 2 * np.pi * 440).astype(np.float32)
    soundfile.write(tmp_path / "c" / "s.wav", tone, sr, subtype="FLOAT")
    (tmp_path / "c" / "m.json").write_text(json.dumps({"audio_filepath": "s.wav", "offset": 0.25,
                                                       "duration": 0.5, "text": "hi"}))
    write_tfrecord(tmp_path / "c" / "r.tfrecord", [example({"label": [7]}), example({"label": [8]})])
    url = upload(s3, "mixed", tmp_path / "c")
    _, out = run(lambda: fn.readers.coco(file_root=url, annotations_file=url + "ann.json"), batch_size=1)
    assert bytes(out[0][0][0].numpy()) == (tmp_path / "c" / "x.jpg").read_bytes()
    assert out[0][1][0].tolist() == [[1, 2, 3, 4]] and out[0][2][0].tolist() == [1]
    from sluice import tfrecord as tfrec

    _, out = run(lambda: fn.readers.tfrecord(path=[url + "r.tfrecord"], features={
        "label": tfrec.FixedLenFeature([1], tfrec.int64, -1)})["label"], batch_size=2)
    assert out[0][0].as_tensor().flatten().tolist() == [7, 8]
    _, out = run(lambda: fn.readers.nemo_asr(manifest_filepaths=[url + "m.json"]), batch_size=1)
    audio, rate, text = out[0]
    assert np.allclose(audio[0].numpy(), tone[2000:6000], atol=1e-6) and bytes(text[0].numpy()) == b"hi"


def test_credentials_from_the_aws_files(s3, tmp_path, monkeypatch):
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(k, raising=False)
    endpoint = s3.meta.endpoint_url
    (tmp_path / "credentials").write_text("[default]\naws_access_key_id = wrong\naws_secret_access_key = x\n"
                                          "[team]\naws_access_key_id = from-file\naws_secret_access_key = s3cr3t\n")
    (tmp_path / "config").write_text(f"[profile team]\nregion = eu-west-1\nendpoint_url = {endpoint}\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_PROFILE", "team")
    s = storage.S3Settings.from_env()
    assert (s.access_key_id, s.secret_access_key, s.region, s.endpoint) == ("from-file", "s3cr3t", "eu-west-1",
                                                                         endpoint)
    s3.create_bucket(Bucket="creds")
    s3.put_object(Bucket="creds", Key="k", Body=b"payload")
    assert storage.read_bytes("s3://creds/k") == b"payload"


def test_each_pipeline_has_s3_clients_of_its_own_closed_with_it(s3, tree):
    """Two pipelines (train and val) read S3 through two sets of clients, sessions of their runtimes; closing one
    pipeline closes its clients only, and nothing is left behind at module level."""
    url = upload(s3, "owners", tree, "data/")
    train, _ = run(lambda: fn.readers.file(file_root=url))
    val, _ = run(lambda: fn.readers.file(file_root=url))
    clients = [p.executor.runtime.sessions()[("s3 clients",)] for p in (train, val)]
    assert clients[0] is not clients[1] and all(len(c) == 1 for c in clients)  # one bucket: one client each
    assert clients[0].store("owners", storage.S3Settings.from_env()) is not clients[1].store(
        "owners", storage.S3Settings.from_env())
    train.close()
    assert clients[0].closed and len(clients[0]) == 0 and not clients[1].closed
    with pytest.raises(storage.StorageError, match="closed"):
        storage.read_bytes(url + "class_0/0.jpg", clients=clients[0])
    assert as_bytes(val.run()[0]) and len(clients[1]) == 1
    val.close()
    assert clients[1].closed
    assert not [name for name, value in vars(storage).items() if isinstance(value, storage.S3Clients)]


def test_s3_clients_outside_a_pipeline(s3):
    """A runtime made by hand (an operator outside a pipeline) keeps its clients until it closes; a call with no
    clients makes its own for the call."""
    s3.create_bucket(Bucket="alone")
    s3.put_object(Bucket="alone", Key="k", Body=b"abc")
    a, b = Runtime(name="a"), Runtime(name="b")
    ca, cb = storage.clients_of(a), storage.clients_of(b)
    assert ca is storage.clients_of(a) and ca is not cb
    assert storage.read_bytes("s3://alone/k", clients=ca) == b"abc" and storage.size("s3://alone/k", clients=cb) == 3
    a.close()
    assert ca.closed and not cb.closed and len(cb) == 1
    b.close()
    assert cb.closed
    assert storage.read_text("s3://alone/k") == "abc"
    with storage.S3Clients() as own:
        assert storage.exists("s3://alone/k", clients=own) and not storage.exists("s3://alone/nope", clients=own)
    assert own.closed
