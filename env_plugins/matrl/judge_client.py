"""The client of the matrl judge service (:mod:`matrl.service`, single node or Ray Serve): the
methods of the in-process judges (``relax``, ``band_gap``, ``bulk_modulus``), over HTTP with httpx.

What it promises an episode (issues 14 and 21):

- **Separate timeouts**: ``connect_timeout_s`` (short: a dead service is found fast) and
  ``timeout_s`` for sending and reading one request (one batched relaxation may take that long).
  Waiting for one of the ``max_in_flight`` connections is *not* timed: a queue in front of a
  healthy service is not a fault (it was: 400 samples at 5 s left 220 unscored).
- **Retries** on every transport failure (refused, reset, dropped, timed out, a truncated or
  garbled reply: ``httpx.RequestError``), on malformed replies (not JSON, wrong shape or count, a
  body whose ``x-body-sha256`` does not match), on HTTP 5xx and 429, and on a 4xx whose
  ``x-request-sha256`` shows that the service did not receive what was sent: ``attempts`` tries,
  exponential backoff with jitter. A 4xx about the request itself is final. When the tries are
  spent, :class:`~matrl.judges.JudgeUnavailable` carries the last reason, and the episode records
  its terms as unscored with that reason.
- **No duplicate in-flight work**: an identical request (same route, same structures) made while
  one is in flight waits for that one's answer instead of sending another.
- **A service that is still starting**: the first readiness check is retried with backoff for up
  to ``startup_wait_s`` before the client gives up with a message saying where it looked.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import httpx
from pymatgen.core import Structure

from matrl.judges import JudgeUnavailable, RelaxRecord
from matrl.structures import structure_to_json
from rlplugs import RetryPolicy

log = logging.getLogger(__name__)


class MalformedReply(Exception):
    """The service's answer could not be read as the answer to the request that was sent."""


class HttpJudges:
    """Drop-in for the in-process MLIP, band-gap and elastic judges, served by a judge service."""

    def __init__(self, url: str, timeout_s: float = 60.0, *, attempts: int = 3, backoff_s: float = 0.5,
                 connect_timeout_s: float = 5.0, max_in_flight: int = 64, startup_wait_s: float = 120.0):
        self.url = url.rstrip("/")
        self.attempts, self.backoff_s = max(1, attempts), backoff_s
        self._http = httpx.Client(
            base_url=self.url,
            timeout=httpx.Timeout(timeout_s, connect=min(connect_timeout_s, timeout_s), pool=None),
            limits=httpx.Limits(max_connections=max_in_flight, max_keepalive_connections=max_in_flight),
        )
        self._in_flight: dict[str, Future] = {}
        self._lock = threading.Lock()
        # requests sent, retries (and retry:<kind>), joined (identical request in flight), rejected
        # (4xx: the request itself), gave_up (retries spent)
        self.stats: Counter[str] = Counter()
        info = wait_for_service(self._http, "/ready", startup_wait_s)
        self.scale, self.name = info["scale"], f"http:{info['mlip']}"

    @classmethod
    def for_policy(cls, url: str, policy: RetryPolicy, **kwargs: Any) -> HttpJudges:
        return cls(url, policy.timeout_s, attempts=policy.attempts, backoff_s=policy.backoff_s, **kwargs)

    # -- judge methods ------------------------------------------------------------------------
    def relax(self, structures: list[Structure]) -> list[RelaxRecord]:
        return [RelaxRecord(**r) for r in self._post("/relax", structures, "records")]

    def band_gap(self, structures: list[Structure]) -> list[float]:
        return [float(v) for v in self._post("/band_gap", structures, "values")]

    def bulk_modulus(self, structures: list[Structure]) -> list[float | None]:
        return [None if v is None else float(v) for v in self._post("/bulk_modulus", structures, "values")]

    # -- plumbing -----------------------------------------------------------------------------
    def _count(self, key: str) -> None:
        with self._lock:
            self.stats[key] += 1

    def _post(self, route: str, structures: list[Structure], key: str) -> list:
        body = json.dumps({"structures": [structure_to_json(s) for s in structures]}, sort_keys=True).encode()
        token = route + hashlib.sha256(body).hexdigest()
        with self._lock:
            future = self._in_flight.get(token)
            mine = future is None
            if mine:
                future = self._in_flight[token] = Future()
        if not mine:
            self._count("joined")
            return future.result()  # the owner's answer or its JudgeUnavailable
        try:
            result = self._send(route, body, key, len(structures))
            future.set_result(result)
            return result
        except BaseException as exc:
            future.set_exception(exc)
            raise
        finally:
            with self._lock:
                del self._in_flight[token]

    def _send(self, route: str, body: bytes, key: str, n: int) -> list:
        sent = hashlib.sha256(body).hexdigest()
        last = ""
        for attempt in range(self.attempts):
            if attempt:
                delay = self.backoff_s * 2 ** (attempt - 1) * (0.5 + random.random())
                log.info("judge %s: %s; retry %d/%d in %.2fs", route, last, attempt, self.attempts - 1, delay)
                time.sleep(delay)
            self._count("requests")
            try:
                response = self._http.post(route, content=body, headers={"content-type": "application/json"})
                if response.status_code == 200:
                    payload = _checked_json(response)
                    values = payload.get(key) if isinstance(payload, dict) else None
                    if not isinstance(values, list) or len(values) != n:
                        raise MalformedReply(f"expected {n} {key}, got {str(payload)[:120]}")
                    return values
                detail = f"HTTP {response.status_code} {response.text[:300]}"
                if response.status_code < 500 and response.status_code != 429:
                    if response.headers.get("x-request-sha256") == sent:
                        self._count("rejected")
                        raise JudgeUnavailable(f"judge service {route}: {detail}")
                    raise MalformedReply(f"{detail} (the service did not receive the request as sent)")
                kind, last = f"http_{response.status_code}", detail
            except httpx.RequestError as exc:
                kind, last = type(exc).__name__, f"{type(exc).__name__}: {exc or 'no detail'}"
            except MalformedReply as exc:
                kind, last = "malformed", f"malformed reply: {exc}"
            if attempt + 1 < self.attempts:
                self._count("retries")
                self._count(f"retry:{kind}")
        self._count("gave_up")
        raise JudgeUnavailable(f"judge service {route} failed {self.attempts} times; last: {last}")


def wait_for_service(http: httpx.Client, route: str, wait_s: float,
                     ready: Callable[[dict[str, Any]], bool] = lambda answer: True) -> dict[str, Any]:
    """``GET route`` on a judge service until it answers 200 with a JSON object ``ready`` accepts;
    that answer. Refused, dropped or garbled answers and 503 ("loading") are asked again, with
    backoff, for up to ``wait_s``: trainers often start while the service is still starting. Any
    other answer is the wrong address and fails at once. Both raise :class:`JudgeUnavailable`
    with a message that starts with the URL and says what to do."""
    url = str(http.base_url).rstrip("/")
    advice = "start one with `rlplugs matrl serve-judges --port PORT`, or fix judge_url"
    deadline, delay, last = time.monotonic() + wait_s, 0.25, "no answer"
    while True:
        try:
            response = http.get(route)
            if response.status_code == 200:
                answer = _checked_json(response)
                if isinstance(answer, dict) and ready(answer):
                    return answer
                raise JudgeUnavailable(f"{url}: its {route} answer is not a matrl judge service's; {advice}")
            last = f"HTTP {response.status_code} {response.text[:200]}"
            if response.status_code != 503:
                raise JudgeUnavailable(f"{url}: GET {route} answered {last}: not a matrl judge service; {advice}")
        except (httpx.RequestError, MalformedReply) as exc:
            last = f"{type(exc).__name__}: {exc}"
        if time.monotonic() + delay > deadline:
            raise JudgeUnavailable(f"{url}: no judge service answered within {wait_s:g} s ({last}); {advice}")
        log.info("judge service at %s: %s; asking again in %.2g s", url, last, delay)
        time.sleep(delay)
        delay = min(delay * 2, 5.0)


def _checked_json(response: httpx.Response) -> Any:
    """The reply's JSON, after checking its body against the ``x-body-sha256`` the service sent."""
    digest = response.headers.get("x-body-sha256")
    if digest != hashlib.sha256(response.content).hexdigest():
        raise MalformedReply("reply body does not match its checksum" if digest else "reply has no body checksum")
    try:
        return json.loads(response.content)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise MalformedReply(f"reply is not JSON ({exc})") from None
