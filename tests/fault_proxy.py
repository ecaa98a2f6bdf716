"""An HTTP/1.1 proxy that breaks a share of the requests it forwards, the way networks and
overloaded services do: for tests and ``benchmarks/judge_faults.py``.

Faults, chosen per request (``rate``, from ``faults``, seeded), or forced in order (``force``):

- ``drop``: the connection closes before any reply; ``reset``: it is reset (RST);
- ``hang``: no reply for ``hang_s``, then the connection closes;
- ``delay``: the real reply, ``delay_s`` late (not a fault for a client that waits long enough);
- ``truncate``: the first half of the real reply, then the connection closes;
- ``garble``: the real reply with its status line or part of its body overwritten by junk.

When the upstream service is down, the client's connection is closed without a reply, as a
load balancer with no live backend would. Each request opens its own upstream connection.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import threading
from collections import Counter
from urllib.parse import urlsplit

FAULTS = ("drop", "reset", "hang", "delay", "truncate", "garble")


class FaultProxy:
    def __init__(self, upstream: str, rate: float = 0.0, faults: tuple[str, ...] = FAULTS, seed: int = 0,
                 hang_s: float = 30.0, delay_s: float = 1.0):
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname, parts.port)
        self.rate, self.faults, self.hang_s, self.delay_s = rate, tuple(faults), hang_s, delay_s
        self.rng = random.Random(seed)
        self.forced: list[str] = []
        self.counts: Counter[str] = Counter()  # requests seen, and faults injected by kind
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._server = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="fault-proxy")

    @property
    def url(self) -> str:
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    def start(self, port: int = 0) -> FaultProxy:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", port), self._loop).result(10)
        return self

    def stop(self) -> None:
        async def close():
            self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def force(self, *faults: str) -> None:
        """The next requests get these faults, in order ("none" for a clean pass)."""
        with self._lock:
            self.forced.extend(faults)

    def _choose(self) -> str:
        with self._lock:
            self.counts["requests"] += 1
            fault = self.forced.pop(0) if self.forced else (
                self.rng.choice(self.faults) if self.rng.random() < self.rate else "none")
            if fault != "none":
                self.counts[fault] += 1
            return fault

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await _read_message(reader)
                if request is None:
                    return
                fault = self._choose()
                if fault == "drop":
                    return
                if fault == "reset":
                    sock = writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    return
                if fault == "hang":
                    await asyncio.sleep(self.hang_s)
                    return
                reply = await self._forward(request)
                if reply is None:  # upstream down
                    return
                if fault == "delay":
                    await asyncio.sleep(self.delay_s)
                elif fault == "truncate":
                    reply = reply[: len(reply) // 2]
                elif fault == "garble":
                    reply, framing_intact = self._garble(reply)
                writer.write(reply)
                await writer.drain()
                # a reply whose framing is broken ends its connection; one garbled only in its body
                # leaves it open, so the client may reuse it (closing it would race that reuse and
                # cause failures no fault was injected for)
                broken = fault == "truncate" or (fault == "garble" and not framing_intact)
                if broken or b"connection: close" in request.lower().split(b"\r\n\r\n")[0]:
                    return
        except (ConnectionError, asyncio.IncompleteReadError, OSError, asyncio.CancelledError):
            return  # a cancelled connection (stop()) ends quietly
        finally:
            writer.close()

    def _garble(self, reply: bytes) -> tuple[bytes, bool]:
        """The reply with junk in its status line or its body; and whether its framing survived."""
        with self._lock:
            junk = bytes(self.rng.randrange(33, 127) for _ in range(12))
            in_status_line = self.rng.random() < 0.5
            head_end = reply.find(b"\r\n\r\n") + 4
            body_len = len(reply) - head_end
            at = head_end + self.rng.randrange(max(body_len - len(junk), 1))
        if in_status_line or body_len <= len(junk):
            return junk + reply[reply.find(b"\r\n"):], False
        return reply[:at] + junk + reply[at + len(junk):], True

    async def _forward(self, request: bytes) -> bytes | None:
        try:
            reader, writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            return None
        try:
            writer.write(request)
            await writer.drain()
            return await _read_message(reader)
        except (ConnectionError, asyncio.IncompleteReadError, OSError):
            return None
        finally:
            writer.close()


async def _read_message(reader: asyncio.StreamReader) -> bytes | None:
    """One HTTP/1.1 request or response with a Content-Length body (what both sides send)."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        return None
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    return head + (await reader.readexactly(length) if length else b"")
