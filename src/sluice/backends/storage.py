"""Where readers' data lives: local paths, or objects in S3 (``s3://bucket/key``), behind one small interface.

Every reader takes URLs beside local paths (``file_root``, ``files``, ``paths``, manifests, annotation files,
index files). This module lists, sizes, opens and reads them; a batch's byte ranges are fetched in one call
(:func:`fetch`), all at once:

* **Local paths** are read by the compiled core (:func:`sluice.native.io.read_ranges`) with the GIL released.
* **S3** goes through `obstore <https://developmentseed.org/obstore/>`_ (Rust's ``object_store``): a batch's
  objects and ranges are requested concurrently (at most ``SLUICE_S3_CONCURRENCY`` in flight, default 64; ranges
  of one object less than 1 MiB apart are merged into one request), every request has a timeout
  (``SLUICE_S3_TIMEOUT`` seconds, default 30; connecting: ``SLUICE_S3_CONNECT_TIMEOUT``, default 5) and failed
  requests (5xx answers, throttling, broken connections, timeouts) are retried with exponential backoff
  (``SLUICE_S3_RETRIES``, default 5, for at most ``SLUICE_S3_RETRY_TIMEOUT`` seconds, default 60). A request that
  still fails raises :class:`StorageError` naming the URL. obstore was chosen over fsspec + s3fs by measurement
  (benchmarks/s3_clients.py; benchmarks/RESULTS.md): 1.9-2.3x the objects per second on many small objects from
  the same server, and merged requests for the many tar members of one shard instead of one request each.

Credentials and endpoint follow the AWS conventions: ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` /
``AWS_SESSION_TOKEN``, else the profile ``AWS_PROFILE`` (default ``default``) of the shared credentials file
(``AWS_SHARED_CREDENTIALS_FILE``, default ``~/.aws/credentials``) and of the config file (``AWS_CONFIG_FILE``,
default ``~/.aws/config``), else the instance's role (web identity, ECS, EC2 metadata); the region from
``AWS_REGION`` / ``AWS_DEFAULT_REGION`` / the profile (default ``us-east-1``); the endpoint from
``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` / the profile's ``endpoint_url`` (S3-compatible stores: MinIO,
Ceph, moto). ``AWS_NO_SIGN_REQUEST=1`` reads public buckets anonymously.

The S3 clients (one obstore store per bucket and settings) belong to their owner, never to the process: a
pipeline's are a session of its runtime (:func:`clients_of`, closed with the pipeline), which readers pass as
``clients=``; a call outside any pipeline (the CLI, a script) gives its own :class:`S3Clients` or none, and then the
call makes clients for itself and drops them when it returns.

Example::

    paths, sizes = list_files("s3://bucket/shards/")
    with S3Clients() as clients:
        data = fetch([("s3://bucket/a.tar", 512, 1000), ("/data/b.tar", 0, None)], clients=clients)
"""

from __future__ import annotations

import asyncio
import configparser
import contextlib
import io
import logging
import os
import posixpath
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from sluice import env as sluice_env
from sluice._cache import cache_dir as _cache_dir
from sluice.errors import ArgumentError
from sluice.runtime import Runtime, run_coroutine

__all__ = ["StorageError", "is_url", "join", "dirname", "basename", "exists", "size", "list_files", "read_bytes",
           "read_text", "open_file", "fetch", "cache_dir", "stat_key", "S3Settings", "S3Clients", "clients_of"]

logger = logging.getLogger(__name__)

SCHEMES = ("s3",)


class StorageError(OSError):
    """A local file or an object that cannot be listed or read; the message names it."""


def cache_dir() -> Path:
    """sluice's cache folder (indexes of shards and record files): :func:`sluice._cache.cache_dir`."""
    return _cache_dir()


# ---- paths and URLs --------------------------------------------------------------------------------------------
def is_url(path: str) -> bool:
    """Whether ``path`` is a URL (``s3://...``); raises for a scheme sluice does not read."""
    head, sep, _ = str(path).partition("://")
    if not sep or "/" in head or not head:
        return False
    if head.lower() not in SCHEMES:
        raise ArgumentError(f"Invalid URL scheme ('{head}') in {path!r}. Supported: s3:// and local paths.")
    return True


def join(root: str | None, name: str) -> str:
    """``name`` under ``root`` (a folder or a URL prefix); an absolute path or a URL ``name`` stands alone."""
    if not root or is_url(name) or os.path.isabs(name):
        return name
    if is_url(root):
        return root.rstrip("/") + "/" + name
    return os.path.join(root, name)


def dirname(path: str) -> str:
    """The folder (URL prefix) holding ``path``."""
    return posixpath.dirname(path) if is_url(path) else os.path.dirname(os.path.abspath(path))


def basename(path: str) -> str:
    return posixpath.basename(path.rstrip("/")) if is_url(path) else os.path.basename(path)


def _split(url: str) -> tuple[str, str]:
    rest = url.split("://", 1)[1]
    bucket, _, key = rest.partition("/")
    if not bucket:
        raise ArgumentError(f"Invalid S3 URL ({url!r}): it names no bucket. Expected s3://bucket/key.")
    return bucket, key


# ---- S3 settings and stores ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class S3Settings:
    """How sluice talks to S3, read from the environment (see the module's doc)."""

    endpoint: str | None
    region: str
    access_key_id: str | None
    secret_access_key: str | None
    session_token: str | None
    anonymous: bool
    timeout: float
    connect_timeout: float
    retries: int
    retry_timeout: float
    concurrency: int

    @classmethod
    def from_env(cls) -> S3Settings:
        """The settings the environment gives now (the AWS files are read again only when it changes); sluice's
        own (``SLUICE_S3_*``) come from :func:`sluice.env.s3`."""
        ours = sluice_env.s3()
        key = (tuple(os.environ.get(k) for k in _ENV_KEYS), ours)
        found = _settings.get(key)
        if found is None:
            found = _settings[key] = cls._read_env(ours)
        return found

    @classmethod
    def _read_env(cls, ours: sluice_env.S3Env) -> S3Settings:
        env = os.environ
        profile = env.get("AWS_PROFILE") or env.get("AWS_DEFAULT_PROFILE") or "default"
        creds = _ini(env.get("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials"), profile)
        conf = _ini(env.get("AWS_CONFIG_FILE", "~/.aws/config"), profile if profile == "default"
                    else f"profile {profile}")
        key, secret, token = env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY"), env.get(
            "AWS_SESSION_TOKEN")
        if not (key and secret):
            for source in (creds, conf):
                if source.get("aws_access_key_id") and source.get("aws_secret_access_key"):
                    key, secret = source["aws_access_key_id"], source["aws_secret_access_key"]
                    token = source.get("aws_session_token")
                    break
            else:
                key = secret = token = None
        return cls(
            endpoint=env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or conf.get("endpoint_url"),
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or conf.get("region") or "us-east-1",
            access_key_id=key, secret_access_key=secret, session_token=token,
            anonymous=env.get("AWS_NO_SIGN_REQUEST", "").lower() in ("1", "true", "yes"),
            timeout=ours.timeout, connect_timeout=ours.connect_timeout, retries=ours.retries,
            retry_timeout=ours.retry_timeout, concurrency=ours.concurrency)

    @property
    def deadline(self) -> float:
        """The longest a request may take, retries included: no read waits longer."""
        return self.retry_timeout + self.timeout + self.connect_timeout + 5.0


_ENV_KEYS = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE",
             "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3",
             "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_NO_SIGN_REQUEST", "HOME")
_settings: dict[tuple, S3Settings] = {}


def _ini(path: str, section: str) -> dict[str, str]:
    parser = configparser.RawConfigParser()
    try:
        parser.read(os.path.expanduser(path))
    except configparser.Error as e:
        logger.warning("ignoring the AWS file %s: %s", path, e)
        return {}
    return dict(parser[section]) if parser.has_section(section) else {}


class S3Clients:
    """The S3 clients (obstore stores, one per bucket and settings) of one owner: a pipeline's, as a session of its
    runtime (:func:`clients_of`), or a caller's outside any pipeline, closed when it is done with them. Nothing
    makes a client process-wide: two pipelines talk to S3 through two sets of clients. Making one imports nothing;
    obstore is imported when the first client is made.

    Example::

        with S3Clients() as clients:
            data = read_bytes("s3://bucket/key", clients=clients)
    """

    def __init__(self) -> None:
        self._stores: dict[tuple[str, S3Settings], Any] = {}
        self._lock = threading.Lock()
        self._closed = False

    def store(self, bucket: str, s: S3Settings) -> Any:
        """The client of ``bucket`` with the settings ``s``, made on first use."""
        with self._lock:
            self._check_open()
            store = self._stores.get((bucket, s))
        if store is not None:
            return store
        store = _make_store(bucket, s)
        with self._lock:
            self._check_open()
            return self._stores.setdefault((bucket, s), store)

    def __len__(self) -> int:
        with self._lock:
            return len(self._stores)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Drop the clients (their connections close once no open file still reads through one); again: nothing."""
        with self._lock:
            self._closed = True
            self._stores.clear()

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError("these S3 clients are closed (their pipeline or owner closed them)")

    def __enter__(self) -> S3Clients:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def clients_of(runtime: Runtime) -> S3Clients:
    """The S3 clients of a pipeline: a session of its runtime, made on first use and closed with it."""
    return runtime.session(("s3 clients",), S3Clients, S3Clients.close)


@contextlib.contextmanager
def _using(clients: S3Clients | None) -> Iterator[S3Clients]:
    """``clients``, or (None: a call outside any pipeline) clients of this call's own, closed when it ends."""
    if clients is not None:
        yield clients
        return
    with S3Clients() as own:
        yield own


def _make_store(bucket: str, s: S3Settings) -> Any:
    try:
        from obstore.store import S3Store
    except ImportError:
        raise ArgumentError("reading s3:// URLs needs obstore: pip install 'sluice[s3]'") from None
    config: dict[str, Any] = {"region": s.region}
    if s.endpoint:
        config["endpoint"] = s.endpoint
        config["virtual_hosted_style_request"] = False
    if s.anonymous:
        config["skip_signature"] = True
    elif s.access_key_id:
        config.update(access_key_id=s.access_key_id, secret_access_key=s.secret_access_key)
        if s.session_token:
            config["session_token"] = s.session_token
    client: dict[str, Any] = {"timeout": timedelta(seconds=s.timeout),
                              "connect_timeout": timedelta(seconds=s.connect_timeout),
                              "allow_http": bool(s.endpoint and s.endpoint.startswith("http://"))}
    retry = {"max_retries": s.retries, "retry_timeout": timedelta(seconds=s.retry_timeout),
             "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=5),
                         "base": 2}}
    return S3Store(bucket, config=config, client_options=client, retry_config=retry)


def _s3(url: str, clients: S3Clients, s: S3Settings | None = None) -> tuple[Any, str, S3Settings]:
    bucket, key = _split(url)
    s = s or S3Settings.from_env()
    return clients.store(bucket, s), key, s


def _error(url: str, exc: BaseException, what: str = "read") -> StorageError:
    if isinstance(exc, StorageError):
        return exc
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        text = "no answer within the timeout (SLUICE_S3_TIMEOUT, retries included)"
    name = type(exc).__name__
    if name == "NotFoundError" or isinstance(exc, FileNotFoundError):
        return StorageError(2, f"cannot {what} '{url}': it does not exist")
    return StorageError(f"cannot {what} '{url}': {text}")


def _run(coro_fn, deadline: float):
    """Run ``coro_fn()`` to completion from synchronous code, giving up after ``deadline`` seconds (in the calling
    thread, or where it runs an event loop, in a thread of the runtime's: :func:`sluice.runtime.run_coroutine`)."""
    return run_coroutine(coro_fn, deadline)


# ---- the interface ---------------------------------------------------------------------------------------------
# Each function that may talk to S3 takes ``clients``: the pipeline's (:func:`clients_of`); None (a call outside
# any pipeline) makes clients for the call and closes them after it. Local paths need none.
def exists(path: str, *, clients: S3Clients | None = None) -> bool:
    if not is_url(path):
        return os.path.exists(path)
    try:
        size(path, clients=clients)
        return True
    except StorageError:
        return False


def size(path: str, *, clients: S3Clients | None = None) -> int:
    """The size of a file or object in bytes."""
    if not is_url(path):
        try:
            return os.stat(path).st_size
        except OSError as e:
            raise StorageError(e.errno, f"cannot read '{path}': {e.strerror}") from None
    return int(_head(path, clients)["size"])


def stat_key(path: str, *, clients: S3Clients | None = None) -> str:
    """What identifies a file's version, for caches: size and modification time (and the ETag of an object)."""
    if not is_url(path):
        st = os.stat(path)
        return f"{os.path.abspath(path)}\0{st.st_size}\0{st.st_mtime_ns}"
    meta = _head(path, clients)
    return f"{path}\0{meta['size']}\0{meta.get('e_tag')}\0{meta.get('last_modified')}"


def _head(url: str, clients: S3Clients | None) -> dict:
    import obstore

    with _using(clients) as own:
        store, key, s = _s3(url, own)
        try:
            return _run(lambda: obstore.head_async(store, key), s.deadline)
        except Exception as e:  # noqa: BLE001 - named with its URL
            raise _error(url, e) from None


def list_files(root: str, *, clients: S3Clients | None = None) -> tuple[list[str], list[int]]:
    """Every file below the folder or URL prefix ``root`` (recursively, sorted by path), with its size."""
    if not is_url(root):
        if not os.path.isdir(root):
            raise StorageError(2, f"'{root}' does not exist or is not a folder")
        found: list[tuple[str, int]] = []
        for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
            dirnames.sort()
            for f in filenames:
                p = os.path.join(dirpath, f)
                found.append((p, os.path.getsize(p)))
        found.sort()
        return [p for p, _ in found], [n for _, n in found]
    import obstore

    bucket = _split(root)[0]
    with _using(clients) as own:
        store, key, s = _s3(root, own)
        prefix = key if not key or key.endswith("/") else key + "/"

        async def listing():
            out = []
            async for chunk in obstore.list(store, prefix=prefix or None):
                out.extend(chunk)
            return out

        try:
            metas = _run(listing, s.deadline)
        except Exception as e:  # noqa: BLE001
            raise _error(root, e, "list") from None
    pairs = sorted((f"s3://{bucket}/{m['path']}", int(m["size"])) for m in metas
                   if not m["path"].endswith("/"))
    return [p for p, _ in pairs], [n for _, n in pairs]


def read_bytes(path: str, *, clients: S3Clients | None = None) -> bytes:
    """The whole file or object."""
    if not is_url(path):
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as e:
            raise StorageError(e.errno, f"cannot read '{path}': {e.strerror}") from None
    return bytes(fetch([(path, 0, None)], clients=clients)[0])


def read_text(path: str, *, clients: S3Clients | None = None) -> str:
    data = read_bytes(path, clients=clients)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise StorageError(f"cannot read '{path}' as UTF-8 text: byte {e.start} is not UTF-8") from None


class _RemoteFile(io.RawIOBase):
    """An object read as a seekable binary file, by ranged requests (obstore's buffered reader, which keeps its
    client for as long as it reads)."""

    def __init__(self, url: str, buffer_size: int, clients: S3Clients | None):
        import obstore

        self.url = url
        with _using(clients) as own:
            store, key, _ = _s3(url, own)
            try:
                self._f = obstore.open_reader(store, key, buffer_size=buffer_size)
            except Exception as e:  # noqa: BLE001
                raise _error(url, e, "open") from None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        try:
            data = self._f.read(len(b))
        except Exception as e:  # noqa: BLE001
            raise _error(self.url, e) from None
        n = len(data)
        memoryview(b).cast("B")[:n] = memoryview(data)
        return n

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._f.seek(offset, whence)

    def tell(self) -> int:
        return self._f.tell()

    def close(self) -> None:
        if not self.closed:
            self._f.close()
        super().close()


def open_file(path: str, buffer_size: int = 1 << 20, *, clients: S3Clients | None = None) -> BinaryIO:
    """A seekable binary file over a local file or an object (read by ranges, ``buffer_size`` at a time)."""
    if not is_url(path):
        try:
            return open(path, "rb")
        except OSError as e:
            raise StorageError(e.errno, f"cannot read '{path}': {e.strerror}") from None
    return io.BufferedReader(_RemoteFile(path, buffer_size, clients), buffer_size=64 << 10)


def fetch(items: Sequence[tuple[str, int, int | None]], *, clients: S3Clients | None = None) -> list[Any]:
    """The bytes of each ``(url, start, size)`` (``size`` None: to the end), fetched concurrently: one bytes-like
    object per item, in order. Local paths are read here too (for callers that mix them; readers read local
    ranges with :func:`sluice.native.io.read_ranges` instead). Raises :class:`StorageError` naming the first
    item that cannot be read, after every request has finished or been cancelled."""
    if not items:
        return []
    remote = [i for i, (p, _, _) in enumerate(items) if is_url(p)]
    out: list[Any] = [None] * len(items)
    for i in set(range(len(items))) - set(remote):
        p, start, n = items[i]
        try:
            with open(p, "rb") as f:
                f.seek(start)
                out[i] = f.read() if n is None else f.read(n)
        except OSError as e:
            raise StorageError(e.errno, f"cannot read '{p}': {e.strerror}") from None
    if remote:
        s = S3Settings.from_env()
        with _using(clients) as own:
            got = _run(lambda: _fetch_remote([items[i] for i in remote], s, own), s.deadline)
        for i, data in zip(remote, got):
            out[i] = data
    return out


async def _fetch_remote(items: list[tuple[str, int, int | None]], s: S3Settings, clients: S3Clients
                        ) -> list[Any]:
    import obstore

    sem = asyncio.Semaphore(s.concurrency)
    # Ranges of one object go as one get_ranges call (merged where close); whole objects as one get each.
    groups: dict[str, list[int]] = {}
    for i, (url, _, n) in enumerate(items):
        groups.setdefault(url if n is not None else f"\0{i}", []).append(i)
    out: list[Any] = [None] * len(items)

    async def one_group(members: list[int]) -> None:
        url = items[members[0]][0]
        store, key, _ = _s3(url, clients, s)
        async with sem:
            try:
                if items[members[0]][2] is None:
                    start = items[members[0]][1]
                    result = await obstore.get_async(store, key, options={"range": {"offset": start}}
                                                     if start else None)
                    out[members[0]] = await result.bytes_async()
                    return
                starts = [items[i][1] for i in members]
                lengths = [items[i][2] for i in members]
                parts = await obstore.get_ranges_async(store, key, starts=starts, lengths=lengths)
            except Exception as e:  # noqa: BLE001
                first = items[members[0]]
                where = url if len(members) == 1 and not first[1] else f"{url} (bytes {first[1]}..)"
                raise _error(where, e) from None
        for i, part in zip(members, parts):
            out[i] = part

    tasks = [asyncio.ensure_future(one_group(m)) for m in groups.values()]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    return out


def to_array(data: Any) -> np.ndarray:
    """A bytes-like object (bytes, obstore's Bytes) as a read-only 1-D uint8 array, without a copy."""
    return np.frombuffer(memoryview(data), np.uint8)
