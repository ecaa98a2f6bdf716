"""The request-handler base of rlplugs' loopback HTTP services (the policy server, the matrl
judge service): JSON bodies in and out with exact lengths, and http.server's per-request stderr
lines routed to the handler module's logger at debug level instead of the terminal."""

from __future__ import annotations

import json
import logging
from http.server import BaseHTTPRequestHandler
from typing import Any


class JSONHandler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        logging.getLogger(type(self).__module__).debug(format, *args)

    def read_json(self) -> dict[str, Any]:
        """The request body as JSON (``{}`` when empty); raises ``ValueError`` when it is not JSON."""
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")

    def send_body(self, status: int, data: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_json(self, status: int, payload: dict[str, Any]) -> None:
        self.send_body(status, json.dumps(payload).encode())
