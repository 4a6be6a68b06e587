"""Fixtures of the reader tests: a private SLUICE_CACHE per test, and one loopback S3 server (moto) per session."""

import pytest


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SLUICE_CACHE", str(tmp_path_factory.mktemp("sluice_cache")))


@pytest.fixture(scope="session")
def s3_server():
    """A moto S3 server on 127.0.0.1 with fault switches (sluice.testing.S3Server); tests reset them."""
    pytest.importorskip("moto.server", reason="the S3 tests need moto[server]")
    pytest.importorskip("obstore", reason="the S3 tests need obstore")
    from sluice.testing import s3_server as serve

    with serve() as server:
        yield server


@pytest.fixture
def s3(s3_server, monkeypatch):
    """The session's S3 server as sluice's endpoint (credentials and short timeouts in the environment), with its
    faults off, and a boto3 client for putting objects."""
    import boto3

    env = {"AWS_ENDPOINT_URL": s3_server.endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true", "SLUICE_S3_TIMEOUT": "5",
           "SLUICE_S3_RETRY_TIMEOUT": "10"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    for k in ("AWS_PROFILE", "AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(k, raising=False)
    s3_server.fail_every, s3_server.stall = 0, 0.0
    client = boto3.client("s3", endpoint_url=s3_server.endpoint, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    yield client
    s3_server.fail_every, s3_server.stall = 0, 0.0

