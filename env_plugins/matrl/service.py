"""A small local HTTP judge service: one process holds the models, many env workers call it.

    rlplugs matrl serve-judges --port 8765 [--device cuda] [--band-gap-model DIR]

Why: each env worker loading CHGNet and MEGNet duplicates memory and, on a GPU host, gives every
worker its own tiny forward passes. The service owns the judges and *batches in flight*: relax
requests arriving within ``batch_window_s`` from any number of workers go through one batched
relaxation. Standard library only (``http.server`` + JSON).

:class:`HttpJudges` is the client, with the same methods as the in-process judges. Connection
errors, timeouts and HTTP 503 become :class:`~rlplugs.rewards.TransientError` (retried by
:func:`matrl.judges.call_judge`); HTTP 4xx become :class:`~matrl.judges.JudgeUnavailable`.
``fault_rate`` makes the service answer that share of requests with 503, for resilience tests.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import urllib.error
import urllib.request
from concurrent.futures import Future
from http.server import ThreadingHTTPServer

from pymatgen.core import Structure

from matrl.judges import JudgeUnavailable, RelaxRecord
from matrl.structures import parse_structure, structure_to_json
from rlplugs.jsonhttp import JSONHandler
from rlplugs.rewards import TransientError

log = logging.getLogger(__name__)


class _RelaxBatcher:
    """Collects relax requests for a short window and runs them as one batch."""

    def __init__(self, mlip, window_s: float):
        self.mlip, self.window_s = mlip, window_s
        self._pending: list[tuple[list[Structure], Future]] = []
        self._cond = threading.Condition()
        threading.Thread(target=self._loop, daemon=True, name="relax-batcher").start()

    def submit(self, structures: list[Structure]) -> list[RelaxRecord]:
        future: Future = Future()
        with self._cond:
            self._pending.append((structures, future))
            self._cond.notify()
        return future.result()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._pending:
                    self._cond.wait()
                self._cond.wait(self.window_s)  # let other workers' requests join this batch
                batch, self._pending = self._pending, []
            flat = [s for structures, _ in batch for s in structures]
            try:
                records = self.mlip.relax(flat)
            except Exception as exc:  # noqa: BLE001 - delivered to every waiting request
                for _, future in batch:
                    future.set_exception(exc)
                continue
            start = 0
            for structures, future in batch:
                future.set_result(records[start : start + len(structures)])
                start += len(structures)


class JudgeService:
    """Serves ``/relax``, ``/band_gap``, ``/bulk_modulus``, ``/health`` over HTTP."""

    def __init__(self, mlip, band_gap=None, elastic=None, host: str = "127.0.0.1", port: int = 0,
                 batch_window_s: float = 0.02, fault_rate: float = 0.0, seed: int = 0):
        self.mlip, self.band_gap, self.elastic = mlip, band_gap, elastic
        self.batcher = _RelaxBatcher(mlip, batch_window_s)
        self.fault_rate = fault_rate
        self.faults_injected = 0
        self._rng = random.Random(seed)
        self._rng_lock = threading.Lock()
        self.server = ThreadingHTTPServer((host, port), self._handler())
        self.server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> JudgeService:
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True, name="judge-service")
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _inject_fault(self) -> bool:
        with self._rng_lock:
            fault = self._rng.random() < self.fault_rate
            self.faults_injected += fault
            return fault

    def answer(self, path: str, payload: dict) -> dict:
        structures = [parse_structure(s, max_atoms=10_000) for s in payload.get("structures", [])]
        if path == "/relax":
            return {"records": [r.to_dict() for r in self.batcher.submit(structures)], "scale": self.mlip.scale}
        if path == "/band_gap" and self.band_gap is not None:
            return {"values": self.band_gap.band_gap(structures)}
        if path == "/bulk_modulus" and self.elastic is not None:
            return {"values": self.elastic.bulk_modulus(structures)}
        raise LookupError(f"no judge serves {path}")

    def _handler(self):
        service = self

        class Handler(JSONHandler):
            def do_GET(self):
                if self.path == "/health":
                    self.send_json(200, {"ok": True, "scale": service.mlip.scale, "mlip": service.mlip.name,
                                     "band_gap": service.band_gap is not None, "elastic": service.elastic is not None})
                else:
                    self.send_json(404, {"error": f"unknown path {self.path}"})

            def do_POST(self):
                if service._inject_fault():
                    self.send_json(503, {"error": "injected fault"})
                    return
                try:
                    self.send_json(200, service.answer(self.path, self.read_json()))
                except LookupError as exc:
                    self.send_json(404, {"error": str(exc)})
                except (ValueError, KeyError) as exc:
                    self.send_json(400, {"error": f"{type(exc).__name__}: {exc}"})
                except Exception as exc:  # noqa: BLE001 - a judge crash is the client's transient error
                    log.exception("judge service error on %s", self.path)
                    self.send_json(503, {"error": f"{type(exc).__name__}: {exc}"})

        return Handler


class HttpJudges:
    """Client for :class:`JudgeService`; drop-in for the in-process MLIP, band-gap and elastic judges."""

    def __init__(self, url: str, timeout_s: float = 60.0):
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        health = self._request("GET", "/health")
        self.scale, self.name = health["scale"], f"http:{health['mlip']}"

    def _request(self, method: str, path: str, payload: dict | None = None) -> dict:
        data = json.dumps(payload).encode() if payload is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:300]
            if exc.code >= 500:
                raise TransientError(f"judge service {path}: HTTP {exc.code} {detail}") from None
            raise JudgeUnavailable(f"judge service {path}: HTTP {exc.code} {detail}") from None
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
            raise TransientError(f"judge service {path} unreachable: {exc}") from None

    def _post(self, path: str, structures: list[Structure]) -> dict:
        return self._request("POST", path, {"structures": [structure_to_json(s) for s in structures]})

    def relax(self, structures: list[Structure]) -> list[RelaxRecord]:
        return [RelaxRecord(**r) for r in self._post("/relax", structures)["records"]]

    def band_gap(self, structures: list[Structure]) -> list[float]:
        return self._post("/band_gap", structures)["values"]

    def bulk_modulus(self, structures: list[Structure]) -> list[float | None]:
        return self._post("/bulk_modulus", structures)["values"]
