"""Helpers for testing operators: run one operator on given samples, in a real pipeline; serve S3 on loopback."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from sluice import fn
from sluice.pipeline.batch import Batch
from sluice.pipeline.graph import make_node
from sluice.pipeline.pipeline import Pipeline, pipeline_def
from sluice.schema import get_schema

__all__ = ["run_op", "run_pipeline", "s3_server", "S3Server"]


def run_op(op_name: str, *inputs: Sequence[Any], device: str = "cpu", layout: str | Sequence[str] = "",
           num_threads: int = 2, seed: int = 1234, device_id: int | None = None, iterations: int = 1,
           input_layout: str | Sequence[str] | None = None, **args: Any) -> Batch | tuple[Batch, ...]:
    """Feed each input (a list of samples) through ``external_source`` into ``fn.<op_name>`` and run once.

    Example::

        out = run_op("flip", [np.zeros((4, 6, 3), np.uint8)], layout="HWC", horizontal=1)
        out[0]     # the flipped sample (torch tensor)

    ``device='gpu'`` or ``'mixed'`` needs CUDA (device_id defaults to 0 then). With ``iterations > 1`` the same
    inputs run again and the last outputs are returned (for random operators).

    ``layout`` is the inputs' layout; for operators that have an argument called ``layout`` themselves
    (``fn.spectrogram``), give the inputs' layout as ``input_layout`` and ``layout`` goes to the operator.
    """
    batch_size = max([len(x) for x in inputs] + [1])
    if device in ("gpu", "mixed") and device_id is None:
        device_id = 0
    if input_layout is not None:
        args["layout"] = layout
        layout = input_layout
    layouts = [layout] * len(inputs) if isinstance(layout, str) else list(layout)
    pipe = Pipeline(batch_size=batch_size, num_threads=num_threads, device_id=device_id, seed=seed,
                    exec_async=False)
    with pipe:
        nodes = [fn.external_source(source=lambda data=list(x): data, layout=lay, cycle=True)
                 for x, lay in zip(inputs, layouts)]
        out = make_node(get_schema(op_name), nodes, dict(args, device=device))
    pipe.set_outputs(*(out if isinstance(out, list) else [out]))
    result: tuple[Batch, ...] = ()
    for _ in range(iterations):
        result = pipe.run()
    pipe.close()
    return result[0] if len(result) == 1 else result


def run_pipeline(build: Callable[[], Any], batch_size: int, *, seed: int = 1234, device_id: int | None = None,
                 num_threads: int = 1) -> tuple[Batch, ...]:
    """Build a pipeline whose graph ``build()`` returns (a node or a tuple of nodes), run it once and close it.

    Example::

        (out,) = run_pipeline(lambda: fn.random.uniform(shape=[3]), batch_size=2)
    """

    @pipeline_def(batch_size=batch_size, num_threads=num_threads, device_id=device_id, seed=seed)
    def pipe():
        return build()

    p = pipe()
    try:
        return p.run()
    finally:
        p.close()


# ------------------------------------------------------------------------------------------------------------
# A real S3 endpoint on loopback (moto's server), with faults on demand
# ------------------------------------------------------------------------------------------------------------
class S3Server:
    """A moto S3 server on 127.0.0.1 (see :func:`s3_server`). ``fail_every = k`` answers every k-th request with
    HTTP 503 (S3's ``SlowDown``, which clients retry); ``stall = s`` holds every request ``s`` seconds before
    answering; :meth:`stop` shuts the server down (connections are then refused). ``log`` records each request
    as ``(method, path, Range header or None)``."""

    def __init__(self) -> None:
        self.endpoint = ""
        self.fail_every = 0
        self.stall = 0.0
        self.requests = 0
        self.failed = 0
        self.log: list[tuple[str, str, str | None]] = []
        self._lock = threading.Lock()
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def _app(self, app):
        def middleware(environ, start_response):
            with self._lock:
                self.requests += 1
                self.log.append((environ.get("REQUEST_METHOD", ""), environ.get("PATH_INFO", ""),
                                 environ.get("HTTP_RANGE")))
                fail = self.fail_every > 0 and self.requests % self.fail_every == 0
                self.failed += fail
            if self.stall:
                time.sleep(self.stall)
            if fail:
                body = (b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>SlowDown</Code><Message>Please reduce "
                        b"your request rate.</Message></Error>")
                start_response("503 Slow Down", [("Content-Type", "application/xml"),
                                                  ("Content-Length", str(len(body)))])
                return [body]
            return app(environ, start_response)
        return middleware

    def start(self) -> None:
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
        from werkzeug.serving import make_server

        class Quiet(MotoRequestHandler):
            def log_request(self, *args: Any, **kwargs: Any) -> None:  # no line per request on stderr
                pass

        app = self._app(DomainDispatcherApplication(create_backend_app))
        self._server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=Quiet)
        host, port = self._server.server_address[:2]
        self.endpoint = f"http://{host}:{port}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="sluice-s3-test-server",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Shut the server down; later requests find the port closed."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join()
            self._server = None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def s3_server(process: bool = False) -> Iterator[Any]:
    """A fresh moto S3 server on loopback for tests and benchmarks (``pip install 'moto[server]'``).

    In this process (default) it yields an :class:`S3Server` (``.endpoint``, fault switches); with ``process``
    it runs in a child process, so that it does not share the caller's GIL (benchmarks), and yields the endpoint
    URL. Point sluice at it with ``AWS_ENDPOINT_URL`` and any ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``.

    Example::

        with s3_server() as server:
            os.environ["AWS_ENDPOINT_URL"] = server.endpoint
    """
    if not process:
        server = S3Server()
        server.start()
        try:
            yield server
        finally:
            server.stop()
        return
    port = _free_port()
    child = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if child.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the moto S3 server did not start on port {port}") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        child.terminate()
        child.wait(10)
