"""Serve a :class:`~rlplugs.episode.Policy` as an OpenAI-compatible chat endpoint on loopback.

verifiers (``vf-eval``, prime-rl's env workers) talks to models over HTTP only. To run its real
rollout machinery offline — on a local HF model (:class:`~rlplugs.policies.HFPolicy`) or a
scripted responder — this module answers ``POST /v1/chat/completions`` (streamed as SSE or
whole) with ``policy(messages)``. It binds 127.0.0.1 on a free port, serves from a daemon
thread, and stops when its context exits, after ``max_requests`` answers, or after
``idle_timeout_s`` without a request, so a forgotten server cannot outlive its use.

Only what a chat loop needs is implemented: text messages in, one text choice out, usage counted
in characters (no tokenizer is assumed). Sampling fields in the request are ignored; the policy
owns its sampling.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from typing import Any

from rlplugs.episode import Message, Policy
from rlplugs.jsonhttp import JSONHandler

log = logging.getLogger(__name__)


def _text(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


class PolicyServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, policy: Policy, model: str, max_requests: int | None):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.policy = policy
        self.model = model
        self.max_requests = max_requests
        self.requests = 0
        self.last_request = time.monotonic()
        self.lock = threading.Lock()  # one generation at a time: policies are not thread-safe

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def answer(self, body: dict[str, Any]) -> str:
        messages: list[Message] = [{"role": m.get("role", "user"), "content": _text(m.get("content"))} for m in body.get("messages", [])]
        with self.lock:
            self.requests += 1
            self.last_request = time.monotonic()
            return self.policy(messages)


class _Handler(JSONHandler):
    server: PolicyServer

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        if self.path.rstrip("/").endswith("/models"):
            self.send_json(200, {"object": "list", "data": [{"id": self.server.model, "object": "model"}]})
        else:
            self.send_json(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:  # noqa: N802
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self.send_json(404, {"error": {"message": f"no route {self.path}"}})
            return
        body = self.read_json()
        try:
            text = self.server.answer(body)
        except Exception as exc:  # noqa: BLE001 - the client gets a 500, the server lives on
            log.exception("policy failed")
            self.send_json(500, {"error": {"message": f"{type(exc).__name__}: {exc}"}})
            return
        prompt_chars = sum(len(_text(m.get("content"))) for m in body.get("messages", []))
        usage = {"prompt_tokens": prompt_chars, "completion_tokens": len(text), "total_tokens": prompt_chars + len(text)}
        head = {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "created": int(time.time()), "model": body.get("model", self.server.model)}
        if not body.get("stream"):
            message = {"role": "assistant", "content": text}
            self.send_json(200, {**head, "object": "chat.completion", "usage": usage,
                             "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})
            return
        chunks = [
            {"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None},
            {"index": 0, "delta": {}, "finish_reason": "stop"},
        ]
        events = [{**head, "object": "chat.completion.chunk", "choices": [c]} for c in chunks]
        events.append({**head, "object": "chat.completion.chunk", "choices": [], "usage": usage})
        data = b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events) + b"data: [DONE]\n\n"
        self.send_body(200, data, "text/event-stream")


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
                server.shutdown()
                return

    threads = [threading.Thread(target=server.serve_forever, daemon=True), threading.Thread(target=watchdog, daemon=True)]
    for t in threads:
        t.start()
    try:
        yield server
    finally:
        stop.set()
        server.shutdown()
        server.server_close()
