"""The matrl judge service: one process (or one Ray Serve replica per GPU) holds the models, many
env workers call it over HTTP.

    rlplugs matrl serve-judges --port 8765 --device cuda                 # one machine, one command
    rlplugs matrl serve-judges --ray --replicas 4 --gpus_per_replica 1   # Ray Serve, see serve_ray.py

Why a service: each env worker loading CHGNet and MEGNet duplicates memory and, on a GPU host,
gives every worker its own tiny forward passes. The service batches *in flight*: requests that
arrive within ``batch_window_s`` from any number of workers go through one batched model call.

Two engines behind one HTTP contract (this module's :class:`JudgeReplica` answers the routes in
both, and :class:`~matrl.judge_client.HttpJudges` is the one client):

- **single node (default): FastAPI on uvicorn**, started by :class:`JudgeService`. Why not Ray
  here: measured on this project's 2-core CPU machine (shared with other jobs, load ~5), Ray 2.60
  took 23 s to start a local cluster and 37 s until a trivial Serve app answered, in 11 processes
  using 820 MB of unique memory (1.6 GB RSS) before any model was loaded; the wheel alone is 79 MB
  (240 MB installed, +321 MB with ``ray[serve]``'s dependencies). uvicorn answers in well under a
  second in the process that loads the models. A judge on one machine gains nothing from a
  cluster scheduler, so the default needs none (``benchmarks/judge_serving.py`` measures both).
- **several GPUs or nodes: Ray Serve** (:mod:`matrl.serve_ray`): replicas per GPU, ``@serve.batch``
  dynamic batching, health checks that restart a replica, one address for many trainer nodes.

The contract (JSON bodies; every answer carries ``x-body-sha256`` of its body and
``x-request-sha256`` of the request body as received, so the client can tell a reply or request
damaged in transit from a real answer):

- ``GET /health`` liveness; ``GET /ready`` 200 once the judges are loaded (scale and MLIP name),
  503 before; ``GET /metrics`` request, batch-size, latency and error metrics (Prometheus text).
- ``POST /relax``, ``/band_gap``, ``/bulk_modulus`` with ``{"structures": [...]}``: 200 with one
  result per structure; 400 when the request itself is bad (does not parse, or the model cannot
  score that cell); 404 when this service has no such judge; 503 when the judge failed otherwise
  (worth a retry). **One bad request never fails its batch**: a batched call that raises is split
  in halves until the failing request is alone (:func:`run_isolated`); the others are answered.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from matrl.plugin import BandGapFolder, Fmax, RelaxSteps, TorchDevice
from matrl.structures import StructureInputError, parse_structure
from rlplugs import PROMETHEUS_CONTENT_TYPE, ServiceMetrics, StrictConfig, UvicornThread

log = logging.getLogger(__name__)

ROUTES = {"/relax": "mlip", "/band_gap": "band_gap", "/bulk_modulus": "elastic"}
# Exceptions a judge raises because of the cell it was given (isolated atoms, an element it does not
# know, an absurd lattice): the request is answered 400 and not retried. Anything else is 503.
INPUT_ERRORS = (ValueError, KeyError, IndexError, TypeError, OverflowError, MemoryError, RecursionError)
MAX_STRUCTURES_PER_REQUEST = 1024
UNHEALTHY_AFTER = 3  # model failures in a row (on requests tried alone) that make a replica unhealthy


class JudgeOptions(StrictConfig):
    """What a judge replica loads and how it batches (``rlplugs matrl serve-judges`` flags)."""

    device: TorchDevice = "cpu"
    relax_steps: RelaxSteps = 20
    fmax: Fmax = 0.1
    graph_workers: int = Field(0, ge=0, description="processes building CHGNet graphs for batched relaxations")
    band_gap_model: BandGapFolder | None = Field(None, description="MatGL-format MEGNet folder; None serves no band gap")
    elastic: bool = Field(True, description="serve bulk moduli (clamped-ion EOS on the MLIP)")
    max_batch_size: int = Field(64, ge=1, description="requests one batched model call may serve")
    batch_window_s: float = Field(0.02, ge=0, description="how long a request waits for others to share its batch")

    def load(self) -> Judges:
        from matrl.judges import CHGNetJudge, EOSElasticJudge, MEGNetBandGapJudge

        mlip = CHGNetJudge(self.device, self.relax_steps, self.fmax, graph_workers=self.graph_workers)
        band_gap = MEGNetBandGapJudge(self.band_gap_model) if self.band_gap_model else None
        return Judges(mlip, band_gap, EOSElasticJudge(mlip) if self.elastic else None)


@dataclass
class Judges:
    """The judge objects one replica serves (``None``: not served here)."""

    mlip: Any
    band_gap: Any = None
    elastic: Any = None

    def call(self, route: str) -> Callable[[list], list]:
        judge = getattr(self, ROUTES[route])
        return {"/relax": lambda s: [r.to_dict() for r in judge.relax(s)],
                "/band_gap": lambda s: judge.band_gap(s), "/bulk_modulus": lambda s: judge.bulk_modulus(s)}[route]


def run_isolated(fn: Callable[[list], list], requests: Sequence[list]) -> list[list | BaseException]:
    """``fn`` over all requests' items in one call, split back per request. When the call raises,
    the requests are halved and retried, so only a request that fails *alone* gets the error."""
    flat = [item for request in requests for item in request]
    try:
        out = fn(flat)
        if len(out) != len(flat):
            raise RuntimeError(f"judge returned {len(out)} results for {len(flat)} structures")
    except Exception as exc:  # noqa: BLE001 - attributed below to the request that caused it
        if len(requests) == 1:
            return [exc]
        mid = len(requests) // 2
        return run_isolated(fn, requests[:mid]) + run_isolated(fn, requests[mid:])
    results, start = [], 0
    for request in requests:
        results.append(out[start : start + len(request)])
        start += len(request)
    return results


class LocalBatcher:
    """``await batcher(item)``: items that arrive within ``wait_s`` of the first (at most
    ``max_size``) go to one ``await fn(items)`` call, which returns one result per item. The
    single-node stand-in for Ray Serve's ``@serve.batch``, which only runs inside a Serve replica."""

    def __init__(self, fn: Callable[[list], Awaitable[list]], max_size: int, wait_s: float):
        self.fn, self.max_size, self.wait_s = fn, max_size, wait_s
        self._queue: asyncio.Queue | None = None

    async def __call__(self, item: Any) -> Any:
        if self._queue is None:  # created on the serving loop, with the task that drains it
            self._queue = asyncio.Queue()
            self._drainer = asyncio.get_running_loop().create_task(self._drain())
        future = asyncio.get_running_loop().create_future()
        await self._queue.put((item, future))
        return await future

    async def _drain(self) -> None:
        while True:
            batch = [await self._queue.get()]
            deadline = time.monotonic() + self.wait_s
            while len(batch) < self.max_size and (left := deadline - time.monotonic()) > 0:
                try:
                    batch.append(await asyncio.wait_for(self._queue.get(), left))
                except TimeoutError:
                    break
            try:
                results = await self.fn([item for item, _ in batch])
            except Exception as exc:  # noqa: BLE001 - delivered to every waiting request
                results = [exc] * len(batch)
            for (_, future), result in zip(batch, results):
                if not future.done():
                    future.set_result(result)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class JudgeReplica:
    """One copy of the judges and the HTTP contract above; FastAPI (here) or Ray Serve
    (:mod:`matrl.serve_ray`) route every request to :meth:`handle`.

    ``batch`` wraps :meth:`run_batch` in the engine's batching (``LocalBatcher`` or
    ``serve.batch``); ``metrics`` is the engine's :class:`~rlplugs.tools.jsonhttp.ServiceMetrics`.
    """

    def __init__(self, metrics: ServiceMetrics):
        self.metrics = metrics
        self.judges: Judges | None = None
        self.load_error: str | None = None
        self.model_failures = 0  # in a row; reset by any answered batch
        self.batched: Callable[[tuple[str, list]], Awaitable[Any]] = self.run_batch_one

    def load(self, loader: Callable[[], Judges]) -> None:
        try:
            self.judges = loader()
        except Exception as exc:  # noqa: BLE001 - reported by /ready and the health check
            self.load_error = f"{type(exc).__name__}: {exc}"
            log.error("judges failed to load: %s", self.load_error)
            log.debug("judges failed to load", exc_info=True)

    @property
    def healthy(self) -> bool:
        return self.load_error is None and self.model_failures < UNHEALTHY_AFTER

    def readiness(self) -> tuple[int, dict[str, Any]]:
        if self.judges is None:
            return 503, {"ready": False, "error": self.load_error or "judges are loading"}
        j = self.judges
        return 200, {"ready": True, "scale": j.mlip.scale, "mlip": j.mlip.name, "band_gap": j.band_gap is not None,
                     "elastic": j.elastic is not None}

    async def run_batch_one(self, item: tuple[str, list]) -> Any:
        return (await self.run_batch([item]))[0]

    async def run_batch(self, items: list[tuple[str, list]]) -> list[Any]:
        """One batched model call per route over the requests of ``items``; per request its
        results or the exception that request alone caused."""
        out: list[Any] = [None] * len(items)
        for route in ROUTES:
            mine = [i for i, (r, _) in enumerate(items) if r == route]
            if not mine:
                continue
            self.metrics.batch(route, len(mine))
            results = await asyncio.to_thread(run_isolated, self.judges.call(route), [items[i][1] for i in mine])
            for i, result in zip(mine, results):
                out[i] = result
        failed = [r for r in out if isinstance(r, BaseException) and not isinstance(r, INPUT_ERRORS)]
        self.model_failures = self.model_failures + 1 if failed and len(failed) == len(out) else 0
        return out

    async def handle(self, method: str, route: str, body: bytes) -> tuple[int, bytes, dict[str, str]]:
        """Status, body and headers of the answer to one request."""
        start = time.perf_counter()
        if method == "GET" and route == "/metrics":
            text = self.metrics.text()
            status, data = (200, text) if text is not None else (404, b"metrics are exported by Ray's metrics agent\n")
            return status, data, {"content-type": PROMETHEUS_CONTENT_TYPE}
        status, payload = await self._answer(method, route, body)
        label = route if route in ROUTES or route in ("/health", "/ready") else "other"
        if status >= 400:
            self.metrics.error(label, str(status))
        self.metrics.answered(label, status, time.perf_counter() - start)
        data = json.dumps(payload).encode()
        return status, data, {"content-type": "application/json", "x-body-sha256": _sha256(data),
                              "x-request-sha256": _sha256(body)}

    async def _answer(self, method: str, route: str, body: bytes) -> tuple[int, dict[str, Any]]:
        if method == "GET" and route == "/health":
            return 200, {"alive": True, "healthy": self.healthy, "ready": self.judges is not None,
                         "model_failures_in_a_row": self.model_failures, "host": socket.gethostname(),
                         "pid": os.getpid()}  # which replica answered
        if method == "GET" and route == "/ready":
            return self.readiness()
        if method != "POST" or route not in ROUTES:
            return 404, {"error": f"no route {method} {route}; routes: GET /health /ready /metrics, POST "
                                  + " ".join(ROUTES)}
        if self.judges is None:
            return 503, {"error": self.load_error or "judges are loading"}
        if getattr(self.judges, ROUTES[route]) is None:
            return 404, {"error": f"this service has no {ROUTES[route]} judge (see rlplugs matrl serve-judges --help)"}
        try:
            structures = _parse_request(body)
        except (ValueError, StructureInputError) as exc:
            return 400, {"error": f"bad request: {exc}"}
        result = await self.batched((route, structures))
        if isinstance(result, BaseException):
            status = 400 if isinstance(result, INPUT_ERRORS) else 503
            if status == 503:
                log.error("judge %s failed: %s: %s", route, type(result).__name__, result)
            return status, {"error": f"{type(result).__name__}: {result}"}
        key = "records" if route == "/relax" else "values"
        return 200, {key: result, "scale": self.judges.mlip.scale}


def _parse_request(body: bytes) -> list:
    payload = json.loads(body or b"{}")
    structures = payload.get("structures") if isinstance(payload, dict) else None
    if not isinstance(structures, list) or not structures or len(structures) > MAX_STRUCTURES_PER_REQUEST:
        raise ValueError(f'the body must be {{"structures": [1 to {MAX_STRUCTURES_PER_REQUEST} CIF or JSON strings]}}')
    return [parse_structure(s, max_atoms=10_000) for s in structures]


def create_app(replica: JudgeReplica):
    """The FastAPI app of a single-node service: every route goes to ``replica.handle``."""
    from fastapi import FastAPI
    from starlette.responses import Response

    app = FastAPI(title="matrl judges", docs_url=None, redoc_url=None, openapi_url=None)

    async def route(request) -> Response:
        status, data, headers = await replica.handle(request.method, request.url.path, await request.body())
        return Response(data, status, headers=headers)

    app.add_route("/{path:path}", route, methods=["GET", "POST"])
    return app


class JudgeService:
    """The single-node service: FastAPI on uvicorn, models loaded in the background so ``/health``
    answers at once and ``/ready`` turns 200 when they are in.

    ``judges`` is a :class:`JudgeOptions` (load those models) or a ready :class:`Judges`.
    ``start()`` serves from a daemon thread (tests, examples, benchmarks); ``serve_forever()``
    serves in the foreground (the CLI)."""

    def __init__(self, judges: JudgeOptions | Judges, host: str = "127.0.0.1", port: int = 0,
                 max_batch_size: int = 64, batch_window_s: float = 0.02):
        if isinstance(judges, JudgeOptions):
            max_batch_size, batch_window_s = judges.max_batch_size, judges.batch_window_s
        self.replica = JudgeReplica(ServiceMetrics("matrl_judge"))
        self.replica.batched = LocalBatcher(self.replica.run_batch, max_batch_size, batch_window_s)
        self._loader = judges.load if isinstance(judges, JudgeOptions) else (lambda: judges)
        self.http = UvicornThread(create_app(self.replica), host, port, name="matrl-judges")
        self.url = self.http.url

    def start(self) -> JudgeService:
        threading.Thread(target=self.replica.load, args=(self._loader,), daemon=True, name="judge-loader").start()
        self.http.start()
        return self

    def stop(self) -> None:
        self.http.stop()

    def serve_forever(self) -> None:
        self.start()
        self.http.wait()
