"""A fault-injecting TCP proxy for HTTP/1.1 (the S3 protocol) on 127.0.0.1, for tests.

It sits between a client and the real S3 server the suite starts, forwards bytes both
ways, and parses only what it needs: each request's head (method, path, headers) and the
length of its body (Content-Length or chunked), so that on a keep-alive connection every
request is seen. A :class:`Rule` matching a request applies one fault to it:

- ``DROP_REPLY``: the request reaches the server (which applies it); the reply is read
  and thrown away and the client's connection closed: the client never learns the outcome;
- ``RESET``: the request never reaches the server; the client gets a TCP reset;
- ``STALL``: the request reaches the server; the reply is held back ``stall_s`` seconds
  (or until the proxy stops): the client's read timeout must fire;
- ``SLOW``: the reply trickles at ``rate_bps`` bytes per second.

Clients do not pipeline HTTP/1.1 requests (botocore, aiohttp), so everything the server
sends after a request head, until the next request head, is that request's reply.
The proxy runs in threads of the test process, binds 127.0.0.1 only, and ``stop()``
closes every socket it opened.
"""

from __future__ import annotations

import enum
import re
import socket
import struct
import threading
import time
from dataclasses import dataclass


class Fault(enum.Enum):
    DROP_REPLY = "drop"
    RESET = "reset"
    STALL = "stall"
    SLOW = "slow"


@dataclass
class Rule:
    method: str  # "PUT", "GET", "HEAD", ... or "*"
    path: str  # regular expression searched in the request target
    fault: Fault
    times: int = 1  # how many matching requests get the fault
    header: str | None = None  # only requests carrying this header (e.g. "if-match")
    stall_s: float = 3600.0
    rate_bps: int = 20_000
    hits: int = 0

    def matches(self, method: str, target: str, headers: dict[str, str]) -> bool:
        return (self.hits < self.times and self.method in ("*", method)
                and re.search(self.path, target) is not None
                and (self.header is None or self.header.lower() in headers))


@dataclass(frozen=True)
class Seen:
    method: str
    target: str
    headers: dict[str, str]
    fault: Fault | None


class _Conn:
    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self.client, self.server = client, server
        self.fault: Rule | None = None
        self.closed = threading.Event()

    def close(self, *, reset: bool = False) -> None:
        if reset:
            try:
                self.client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack("ii", 1, 0))
            except OSError:
                pass
        self.closed.set()
        for sock in (self.client, self.server):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


class _Reader:
    """Buffered reads from a socket that forward every byte they consume."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buffer = sock, b""

    def fill(self) -> bool:
        data = self.sock.recv(65536)
        if not data:
            return False
        self.buffer += data
        return True

    def take_until(self, marker: bytes) -> bytes | None:
        while marker not in self.buffer:
            if not self.fill():
                return None
        index = self.buffer.index(marker) + len(marker)
        out, self.buffer = self.buffer[:index], self.buffer[index:]
        return out

    def take(self, count: int) -> bytes | None:
        while len(self.buffer) < count:
            if not self.fill():
                return None
        out, self.buffer = self.buffer[:count], self.buffer[count:]
        return out


class FaultProxy:
    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.split("://", 1)[-1].rstrip("/").rpartition(":")
        self.upstream = (host, int(port))
        self.rules: list[Rule] = []
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._conns: list[_Conn] = []
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        self._refusing = threading.Event()
        self._accept = threading.Thread(target=self._accept_loop, name="fault-proxy",
                                        daemon=True)
        self._accept.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def add(self, rule: Rule) -> Rule:
        with self._lock:
            self.rules.append(rule)
        return rule

    def clear(self) -> None:
        with self._lock:
            self.rules.clear()

    def kill_server(self) -> None:
        """As if the server died: open connections are reset, new ones reset at once. The
        port stays ours (a closed port could be reused by another test's listener)."""
        self._refusing.set()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            conn.close(reset=True)

    def stop(self) -> None:
        self._stopping.set()
        self._listener.close()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            conn.close()
        for thread in [self._accept, *self._threads]:
            thread.join(timeout=5)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _accept_loop(self) -> None:
        self._listener.settimeout(0.1)  # close() does not wake a blocked accept()
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            if self._refusing.is_set():
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                client.close()
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=10)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            conn = _Conn(client, server)
            threads = [threading.Thread(target=self._requests, args=(conn,), daemon=True),
                       threading.Thread(target=self._replies, args=(conn,), daemon=True)]
            with self._lock:
                self._conns.append(conn)
                self._threads += threads
            for thread in threads:
                thread.start()

    def _match(self, method: str, target: str, headers: dict[str, str]) -> Rule | None:
        with self._lock:
            rule = next((r for r in self.rules if r.matches(method, target, headers)), None)
            if rule is not None:
                rule.hits += 1
            self.seen.append(Seen(method, target, headers, rule.fault if rule else None))
        return rule

    def _requests(self, conn: _Conn) -> None:
        reader = _Reader(conn.client)
        try:
            while True:
                head = reader.take_until(b"\r\n\r\n")
                if head is None:
                    break
                lines = head.decode("latin-1").split("\r\n")
                method, target = (lines[0].split(" ") + ["", ""])[:2]
                headers = {k.strip().lower(): v.strip() for k, _, v in
                           (line.partition(":") for line in lines[1:] if line)}
                rule = self._match(method, target, headers)
                conn.fault = rule
                if rule is not None and rule.fault is Fault.RESET:
                    conn.close(reset=True)
                    return
                conn.server.sendall(head)
                if not self._forward_body(reader, conn, headers):
                    break
        except OSError:
            pass
        conn.close()

    @staticmethod
    def _forward_body(reader: _Reader, conn: _Conn, headers: dict[str, str]) -> bool:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            while True:
                size_line = reader.take_until(b"\r\n")
                if size_line is None:
                    return False
                conn.server.sendall(size_line)
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    trailer = reader.take_until(b"\r\n") if reader.buffer[:2] != b"\r\n" \
                        else reader.take(2)
                    while trailer not in (None, b"\r\n"):
                        conn.server.sendall(trailer)
                        trailer = reader.take_until(b"\r\n")
                    if trailer is None:
                        return False
                    conn.server.sendall(trailer)
                    return True
                data = reader.take(size + 2)
                if data is None:
                    return False
                conn.server.sendall(data)
        length = int(headers.get("content-length", "0") or 0)
        while length > 0:
            if not reader.buffer and not reader.fill():
                return False
            data = reader.buffer[:length]
            reader.buffer = reader.buffer[len(data):]
            conn.server.sendall(data)
            length -= len(data)
        return True

    def _replies(self, conn: _Conn) -> None:
        pending = b""  # bytes of a faulted request's reply not yet judged
        try:
            while True:
                data = conn.server.recv(65536)
                if not data:
                    break
                rule = conn.fault
                if rule is None:
                    conn.client.sendall(data)
                    continue
                # Interim replies (botocore's PUTs send "Expect: 100-continue") pass: the
                # client sends the body only after "100 Continue". The fault hits the
                # final reply, which the server sends once it has applied the request.
                pending += data
                while re.match(rb"HTTP/1\.[01] 1\d\d ", pending) and b"\r\n\r\n" in pending:
                    end = pending.index(b"\r\n\r\n") + 4
                    conn.client.sendall(pending[:end])
                    pending = pending[end:]
                if not pending or (len(pending) < 12 and b"\r\n" not in pending):
                    continue
                data, pending = pending, b""
                if rule.fault is Fault.DROP_REPLY:
                    break  # the server answered (so it applied the request): drop it
                if rule.fault is Fault.STALL:
                    if conn.closed.wait(rule.stall_s) or self._stopping.is_set():
                        break
                    conn.client.sendall(data)
                    conn.fault = None
                elif rule.fault is Fault.SLOW:
                    for start in range(0, len(data), 512):
                        if conn.closed.is_set():
                            return
                        conn.client.sendall(data[start:start + 512])
                        time.sleep(512 / rule.rate_bps)
        except OSError:
            pass
        conn.close()
