"""What rlplugs' HTTP services (the policy server, the matrl judge service) share: an ASGI app
served by uvicorn, in the foreground (a CLI command) or from a background thread (a ``with``
block in a test, an example or a benchmark), and request/latency/error metrics in Prometheus'
text format.

Why uvicorn in a thread: the services are started next to the code that uses them (``vf-eval``
needs a model endpoint for one evaluation; a test needs a judge service for one module), so they
must start in well under a second, bind a free port chosen by the OS, and stop cleanly when the
block exits. The socket is bound here, before uvicorn starts, so the URL is known at once.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any

log = logging.getLogger(__name__)


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket (``port=0``: a free one chosen by the OS)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


class UvicornThread:
    """Serves ``app`` with uvicorn from a daemon thread; ``url`` is known once constructed."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, name: str = "http-service"):
        import uvicorn

        self.sock = bind(host, port)
        self.host, self.port = self.sock.getsockname()[:2]
        # access logs off: a judge answers thousands of requests a minute; metrics count them
        config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_keep_alive=30,
                                timeout_graceful_shutdown=2)
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True, name=name)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self, wait_s: float = 30.0) -> UvicornThread:
        self._thread.start()
        deadline = time.monotonic() + wait_s
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the HTTP service on {self.url} did not start")
            time.sleep(0.01)
        return self

    def wait(self) -> None:
        """Block until the server stops (Ctrl-C stops it)."""
        try:
            while self._thread.is_alive():
                self._thread.join(0.5)
        except KeyboardInterrupt:
            self.stop()

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=10)
        self.sock.close()


class ServiceMetrics:
    """Request, batch-size, latency and error metrics of one service.

    ``backend="prometheus"``: ``prometheus_client`` with one registry per service (several services
    may live in one process), read as Prometheus text from :meth:`text` (the ``/metrics`` route).
    ``backend="ray"``: Ray Serve's metrics, which Ray's metrics agent exports in the same format
    on every node (prefixed ``ray_``, tagged with the replica), so Prometheus sums the replicas.
    """

    LATENCY_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
    BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)

    def __init__(self, prefix: str, backend: str = "prometheus"):
        self.backend = backend
        self.registry = None
        if backend == "prometheus":
            from prometheus_client import CollectorRegistry

            self.registry = CollectorRegistry()
        self._requests = self._metric("counter", f"{prefix}_requests", "requests answered, by route and HTTP status",
                                      ("route", "status"))
        self._latency = self._metric("histogram", f"{prefix}_request_seconds", "time from request to answer, by route",
                                     ("route",), self.LATENCY_BUCKETS)
        self._batch = self._metric("histogram", f"{prefix}_batch_size", "requests served by one batched model call",
                                   ("route",), self.BATCH_BUCKETS)
        self._errors = self._metric("counter", f"{prefix}_errors", "requests that failed, by route and kind",
                                    ("route", "kind"))

    def _metric(self, kind: str, name: str, doc: str, labels: tuple[str, ...], buckets=()):
        """``add(value, *label_values)`` for one counter or histogram of the chosen backend."""
        if self.backend == "ray":
            from ray.serve import metrics as ray_metrics

            if kind == "counter":
                metric = ray_metrics.Counter(name, description=doc, tag_keys=labels)
                return lambda value, *values: metric.inc(value, tags=dict(zip(labels, values)))
            metric = ray_metrics.Histogram(name, description=doc, boundaries=list(buckets), tag_keys=labels)
            return lambda value, *values: metric.observe(value, tags=dict(zip(labels, values)))
        import prometheus_client

        if kind == "counter":
            metric = prometheus_client.Counter(name, doc, labels, registry=self.registry)
            return lambda value, *values: metric.labels(*values).inc(value)
        metric = prometheus_client.Histogram(name, doc, labels, buckets=buckets, registry=self.registry)
        return lambda value, *values: metric.labels(*values).observe(value)

    def answered(self, route: str, status: int, seconds: float) -> None:
        self._requests(1, route, str(status))
        self._latency(seconds, route)

    def batch(self, route: str, size: int) -> None:
        self._batch(size, route)

    def error(self, route: str, kind: str) -> None:
        self._errors(1, route, kind)

    def text(self) -> bytes | None:
        """The Prometheus text of this service (``None`` on Ray: Ray's agent exports the metrics)."""
        if self.registry is None:
            return None
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
