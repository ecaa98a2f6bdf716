"""Serve a :class:`~rlplugs.episode.Policy` as an OpenAI-compatible chat endpoint on loopback.

verifiers (``vf-eval``, prime-rl's env workers) talks to models over HTTP only. To run its real
rollout machinery offline — on a local HF model (:class:`~rlplugs.tools.policies.HFPolicy`) or a
scripted responder — this module answers ``POST /v1/chat/completions`` (streamed as SSE or
whole) with ``policy(messages)``, on FastAPI and uvicorn (the stack of TRL's ``vllm-serve``).
It binds 127.0.0.1 on a free port, serves from a daemon thread, and stops when its context exits,
after ``max_requests`` answers, or after ``idle_timeout_s`` without a request, so a forgotten
server cannot outlive its use. ``GET /health`` and ``/ready`` answer for orchestrators, ``GET
/metrics`` gives request, latency and error counts in Prometheus' text format.

Only what a chat loop needs is implemented: text messages in, one text choice out, usage counted
in characters (no tokenizer is assumed). Sampling fields in the request are ignored; the policy
owns its sampling. Policies are not thread-safe, so one generation runs at a time (in a worker
thread, so the server keeps answering health checks meanwhile).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

from rlplugs.episode import Message, Policy
from rlplugs.tools.jsonhttp import PROMETHEUS_CONTENT_TYPE, ServiceMetrics, UvicornThread

log = logging.getLogger(__name__)


def _text(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


class PolicyServer:
    """The policy behind an OpenAI-compatible app; ``base_url`` is the OpenAI base URL."""

    def __init__(self, policy: Policy, model: str, max_requests: int | None):
        self.policy = policy
        self.model = model
        self.max_requests = max_requests
        self.requests = 0
        self.last_request = time.monotonic()
        self.lock = threading.Lock()  # one generation at a time: policies are not thread-safe
        self.metrics = ServiceMetrics("rlplugs_policy")
        self.http = UvicornThread(self._app(), name="policy-server")

    @property
    def base_url(self) -> str:
        return f"{self.http.url}/v1"

    def answer(self, body: dict[str, Any]) -> str:
        messages: list[Message] = [{"role": m.get("role", "user"), "content": _text(m.get("content"))}
                                   for m in body.get("messages", [])]
        with self.lock:
            self.requests += 1
            self.last_request = time.monotonic()
            return self.policy(messages)

    def _app(self):
        from fastapi import FastAPI
        from starlette.responses import JSONResponse, Response

        app = FastAPI(title="rlplugs policy", docs_url=None, redoc_url=None, openapi_url=None)

        def error(status: int, message: str) -> JSONResponse:
            return JSONResponse({"error": {"message": message}}, status)

        async def get(request) -> Response:
            path = request.url.path.rstrip("/")
            if path.endswith("/models"):
                return JSONResponse({"object": "list", "data": [{"id": self.model, "object": "model"}]})
            if path in ("/health", "/ready"):
                return JSONResponse({"ok": True, "model": self.model, "requests": self.requests})
            if path == "/metrics":
                return Response(self.metrics.text(), media_type=PROMETHEUS_CONTENT_TYPE)
            return error(404, f"no route {request.url.path}")

        async def post(request) -> Response:
            start = time.perf_counter()
            if not request.url.path.rstrip("/").endswith("/chat/completions"):
                return error(404, f"no route {request.url.path}")
            try:
                body = json.loads(await request.body() or b"{}")
                if not isinstance(body, dict):
                    raise ValueError("the body must be a JSON object")
            except ValueError as exc:
                self.metrics.error("chat", "bad_request")
                return error(400, f"bad request body: {exc}")
            try:
                text = await asyncio.to_thread(self.answer, body)
            except Exception as exc:  # noqa: BLE001 - the client gets a 500, the server lives on
                log.exception("policy failed")
                self.metrics.error("chat", type(exc).__name__)
                self.metrics.answered("chat", 500, time.perf_counter() - start)
                return error(500, f"{type(exc).__name__}: {exc}")
            self.metrics.answered("chat", 200, time.perf_counter() - start)
            return _completion(body, text, self.model)

        app.add_route("/{path:path}", get, methods=["GET"])
        app.add_route("/{path:path}", post, methods=["POST"])
        return app


def _completion(body: dict[str, Any], text: str, model: str):
    """The OpenAI chat-completion answer: one JSON object, or SSE chunks when ``stream`` is set."""
    from starlette.responses import JSONResponse, Response

    prompt_chars = sum(len(_text(m.get("content"))) for m in body.get("messages", []))
    usage = {"prompt_tokens": prompt_chars, "completion_tokens": len(text), "total_tokens": prompt_chars + len(text)}
    head = {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "created": int(time.time()), "model": body.get("model", model)}
    if not body.get("stream"):
        message = {"role": "assistant", "content": text}
        return JSONResponse({**head, "object": "chat.completion", "usage": usage,
                             "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})
    chunks = [
        {"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None},
        {"index": 0, "delta": {}, "finish_reason": "stop"},
    ]
    events = [{**head, "object": "chat.completion.chunk", "choices": [c]} for c in chunks]
    events.append({**head, "object": "chat.completion.chunk", "choices": [], "usage": usage})
    data = b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events) + b"data: [DONE]\n\n"
    return Response(data, media_type="text/event-stream")


@contextlib.contextmanager
def serve_policy(
    policy: Policy, model: str = "rlplugs-policy", max_requests: int | None = None, idle_timeout_s: float = 600.0
) -> Iterator[PolicyServer]:
    """Serve ``policy`` for the duration of the ``with`` block; yields the server
    (``server.base_url`` is the OpenAI base URL, ``server.requests`` the answers given)."""
    server = PolicyServer(policy, model, max_requests)
    stop = threading.Event()

    def watchdog() -> None:
        while not stop.wait(0.2):
            idle = time.monotonic() - server.last_request > idle_timeout_s
            spent = server.max_requests is not None and server.requests >= server.max_requests
            if idle or spent:
                log.info("policy server stopping (%s)", "idle" if idle else f"{server.requests} requests served")
                server.http.stop()
                return

    server.http.start()
    threading.Thread(target=watchdog, daemon=True).start()
    try:
        yield server
    finally:
        stop.set()
        server.http.stop()
