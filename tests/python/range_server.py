"""An HTTP/1.1 object server on 127.0.0.1 for the remote-reading tests: Range, ETag and
conditional requests as object stores answer them, request and byte accounting, and faults
scripted per object (5xx/429 answers, 403/404, ignored Range, truncated bodies, stalls, the
object replaced after some requests), hostile answers (a Content-Length that lies, an endless
body, a body longer than its range, If-Match ignored, a Content-Range of another size), and
objects that answer only requests carrying their query (a presigned URL's).

Not a test file: tests import it (conftest.py puts this folder on sys.path)::

    with RangeServer({"data/x.nii.gz": blob}) as server:
        server.fail("data/x.nii.gz", 503, times=2)
        vp.load(server.url("data/x.nii.gz"), storage_options={"allow_http": True})
        assert [r.status for r in server.log()] == [503, 503, 200]

Handlers run on daemon threads, stalls wait on an event that stop() sets, and stop() closes the
connections clients keep alive, so a failing test never leaves pytest waiting on the server.
"""

from __future__ import annotations

import hashlib
import re
import socket
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple
from urllib.parse import quote, unquote, urlsplit

_RANGE = re.compile(r"bytes=(\d*)-(\d*)")


class Request(NamedTuple):
    """One request as the server saw it, with the status it answered."""
    method: str
    path: str              # the object's key: the URL path without its leading "/"
    range: str | None      # the Range header as sent
    status: int
    headers: dict[str, str]  # the request's headers, names in lower case
    query: str = ""        # the URL's query as sent, without the "?"


@dataclass
class _Object:
    data: bytes
    etag: str
    last_modified: float


@dataclass
class _Fault:
    # "status", "stall", "truncate", "ignore_range", "ignore_if_match" (the last two change
    # how the request is read), "claim_length", "endless", "longer", "wrong_total" (hostile
    # answers)
    kind: str
    remaining: int | None  # requests it still applies to; None: every one
    status: int = 0
    seconds: float = 0.0
    keep: int = 0          # bytes of the body sent before a truncation or a stall
    stall_body: bool = False
    value: int = 0         # the Content-Length claimed, the extra bytes, the total stated

# Faults that change how a request is read rather than what is answered.
_MODIFIERS = ("ignore_range", "ignore_if_match")
# How long an endless body runs at most (stop() ends it sooner): every test stays bounded.
ENDLESS_SECONDS = 10.0


class RangeServer:
    """A threaded HTTP server answering GET and HEAD for an in-memory dict {key: bytes}.

    Answers carry Content-Length, a quoted ETag that changes whenever an object is replaced,
    Last-Modified and Accept-Ranges: bytes. A single ``Range: bytes=a-b`` / ``bytes=a-`` /
    ``bytes=-n`` is answered 206 with Content-Range (416 when it starts past the end); several
    ranges or a malformed header are ignored (200, the whole body), as RFC 9110 allows.
    If-Match (412), If-None-Match (304) and If-Range (by ETag) are honoured.

    Faults apply to the requests of one key, in the order they were scripted; each counts the
    requests it has answered and ends after ``times`` (None: never). All methods are
    thread-safe."""

    def __init__(self, objects: dict[str, bytes] | None = None) -> None:
        self._lock = threading.Lock()
        self._objects: dict[str, _Object] = {}
        self._generation = 0
        self._faults: dict[str, list[_Fault]] = {}
        self._replacements: dict[str, tuple[int, bytes]] = {}
        self._queries: dict[str, str] = {}
        self._served: Counter[str] = Counter()  # requests per key since start (for replace_after)
        self._requests: Counter[str] = Counter()
        self._bytes: Counter[str] = Counter()
        self._log: list[Request] = []
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._handlers: set[threading.Thread] = set()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        for key, data in (objects or {}).items():
            self.put(key, data)

    # ---- lifecycle -----------------------------------------------------------------------

    def start(self) -> RangeServer:
        """Listen on a free port of 127.0.0.1 and serve from a daemon thread."""
        if self._httpd is not None:
            raise RuntimeError("the server is already started")
        self._stopping.clear()
        httpd = _Server(("127.0.0.1", 0), _handler_for(self))
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="range-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving: wake stalled handlers, close kept-alive connections, free the port."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._stopping.set()
        httpd.shutdown()
        with self._lock:
            connections, handlers = list(self._connections), list(self._handlers)
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        # Woken and disconnected, the handlers end at once; after stop() the log is complete.
        deadline = time.monotonic() + 5
        for thread in handlers:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> RangeServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the server is not started")
        return self._httpd.server_address[1]

    def url(self, key: str = "") -> str:
        """The http:// URL of ``key`` (or of the server's root)."""
        return f"http://127.0.0.1:{self.port}/{quote(key.lstrip('/'))}"

    # ---- objects -------------------------------------------------------------------------

    def put(self, key: str, data: bytes) -> str:
        """Create or replace the object ``key``; returns its new ETag (quoted)."""
        key = key.lstrip("/")
        with self._lock:
            return self._put_locked(key, bytes(data))

    def _put_locked(self, key: str, data: bytes) -> str:
        self._generation += 1
        digest = hashlib.sha1(data).hexdigest()[:16]
        etag = f'"{digest}-{self._generation}"'  # new even when the bytes are the same
        old = self._objects.get(key)
        # Last-Modified has one-second resolution: keep it moving forward on every replacement.
        modified = time.time() if old is None else max(time.time(), old.last_modified + 1)
        self._objects[key] = _Object(data, etag, modified)
        return etag

    def delete(self, key: str) -> None:
        """Remove ``key``: requests for it are answered 404."""
        with self._lock:
            self._objects.pop(key.lstrip("/"), None)

    def etag(self, key: str) -> str:
        """The current ETag of ``key``, quoted as the server sends it."""
        with self._lock:
            return self._objects[key.lstrip("/")].etag

    def data(self, key: str) -> bytes:
        """The bytes ``key`` holds now."""
        with self._lock:
            return self._objects[key.lstrip("/")].data

    # ---- accounting ----------------------------------------------------------------------

    def requests(self, key: str | None = None) -> int:
        """Requests received for ``key`` (every key when None) since the last reset()."""
        with self._lock:
            return self._requests[key.lstrip("/")] if key is not None else self._requests.total()

    def bytes_sent(self, key: str | None = None) -> int:
        """Body bytes written for ``key`` (every key when None) since the last reset()."""
        with self._lock:
            return self._bytes[key.lstrip("/")] if key is not None else self._bytes.total()

    def log(self, key: str | None = None) -> list[Request]:
        """The requests answered since the last reset(), in order, for ``key`` or for all."""
        with self._lock:
            entries = list(self._log)
        return entries if key is None else [r for r in entries if r.path == key.lstrip("/")]

    def reset(self) -> None:
        """Clear the counters and the log (objects, faults and replacements stay)."""
        with self._lock:
            self._requests.clear()
            self._bytes.clear()
            self._log.clear()

    # ---- faults --------------------------------------------------------------------------

    def _add(self, key: str, fault: _Fault) -> None:
        with self._lock:
            self._faults.setdefault(key.lstrip("/"), []).append(fault)

    def fail(self, key: str, status: int = 503, times: int | None = 1) -> None:
        """Answer ``status`` (503, 500, 429, 403, 404, ...) to the next ``times`` requests."""
        self._add(key, _Fault("status", times, status=status))

    def deny(self, key: str, status: int = 403) -> None:
        """Answer ``status`` (403 or 404) to every request from now on."""
        self.fail(key, status, times=None)

    def ignore_range(self, key: str, times: int | None = None) -> None:
        """Answer Range requests 200 with the whole body, as servers without range support do."""
        self._add(key, _Fault("ignore_range", times))

    def truncate(self, key: str, keep: int, times: int | None = 1) -> None:
        """Promise the full Content-Length, send ``keep`` bytes of the body, close the
        connection."""
        self._add(key, _Fault("truncate", times, keep=keep))

    def stall(self, key: str, seconds: float, times: int | None = 1,
              after: int | None = None) -> None:
        """Wait ``seconds`` before answering (before the status line; with ``after``, after
        sending the headers and ``after`` bytes of the body), then answer normally. stop()
        ends the wait."""
        self._add(key, _Fault("stall", times, seconds=seconds, keep=after or 0,
                              stall_body=after is not None))

    def ignore_if_match(self, key: str, times: int | None = None) -> None:
        """Answer as if If-Match were absent: the object as it is now, with its own ETag (what a
        cache in front of a store may do)."""
        self._add(key, _Fault("ignore_if_match", times))

    def claim_length(self, key: str, length: int, times: int | None = 1) -> None:
        """Send the headers with ``Content-Length: length`` (Content-Range as usual), then the
        real body, then hang up."""
        self._add(key, _Fault("claim_length", times, value=length))

    def endless(self, key: str, times: int | None = 1) -> None:
        """Answer with a Content-Length of 10**15 and a body that never ends: the object's bytes,
        then filler, until the client hangs up, stop() is called or ENDLESS_SECONDS pass."""
        self._add(key, _Fault("endless", times))

    def longer(self, key: str, extra: int, times: int | None = 1) -> None:
        """Answer a range with ``extra`` bytes more than it holds (the Content-Length says so
        too; Content-Range names the range asked for)."""
        self._add(key, _Fault("longer", times, value=extra))

    def wrong_total(self, key: str, total: int, times: int | None = 1) -> None:
        """Answer with Content-Range's total (the object's size) stated as ``total``."""
        self._add(key, _Fault("wrong_total", times, value=total))

    def require_query(self, key: str, query: str) -> None:
        """Answer 403 to requests for ``key`` whose query is not exactly ``query`` (as a store
        checks a presigned URL's signature)."""
        with self._lock:
            self._queries[key.lstrip("/")] = query

    def replace_after(self, key: str, count: int, data: bytes) -> None:
        """Replace the object with ``data`` (a new ETag) once ``count`` more requests for it
        have been answered."""
        key = key.lstrip("/")
        with self._lock:
            self._replacements[key] = (self._served[key] + count, bytes(data))

    def clear_faults(self, key: str | None = None) -> None:
        """Drop the faults and pending replacements of ``key`` (of every key when None)."""
        with self._lock:
            if key is None:
                self._faults.clear()
                self._replacements.clear()
            else:
                self._faults.pop(key.lstrip("/"), None)
                self._replacements.pop(key.lstrip("/"), None)

    def _take_faults(self, key: str) -> tuple[_Fault | None, set[str]]:
        """(the fault that shapes this request's answer, the modifiers that apply to it), each
        counted as used; a modifier counts only the answers that carry the object. Called with
        the lock held."""
        active = [f for f in self._faults.get(key, []) if f.remaining != 0]
        response = next((f for f in active if f.kind not in _MODIFIERS), None)
        modifiers: list[_Fault] = []
        if response is None or response.kind != "status":
            for kind in _MODIFIERS:
                modifiers += [f for f in active if f.kind == kind][:1]
        for fault in (response, *modifiers):
            if fault is not None and fault.remaining is not None:
                fault.remaining -= 1
        return response, {f.kind for f in modifiers}

    # ---- request handling (called from handler threads) ----------------------------------

    def _begin(self, key: str, query: str) -> tuple[_Object | None, _Fault | None, set[str],
                                                    bool]:
        """(the object, the fault shaping the answer, the modifiers, whether the query is the
        one required)."""
        with self._lock:
            self._requests[key] += 1
            fault, modifiers = self._take_faults(key)
            allowed = self._queries.get(key, query) == query
            return self._objects.get(key), fault, modifiers, allowed

    def _answered(self, method: str, key: str, range_header: str | None, status: int,
                  headers: dict[str, str], query: str = "") -> None:
        """Record a request as its status line goes out, before the client can see the answer
        (a test reading the log right after a call finds it there), and apply a replacement
        due after it: its answer already holds the old bytes."""
        with self._lock:
            self._log.append(Request(method, key, range_header, status, headers, query))
            self._served[key] += 1
            pending = self._replacements.get(key)
            if pending is not None and self._served[key] >= pending[0]:
                del self._replacements[key]
                self._put_locked(key, pending[1])

    def _count_bytes(self, key: str, n: int) -> None:
        with self._lock:
            self._bytes[key] += n


class _Server(ThreadingHTTPServer):
    daemon_threads = True    # a handler stuck on a client never keeps pytest from exiting
    block_on_close = False

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up (timed out, gave up on a stall) is part of the tests; any other
        error in a handler is reported as usual."""
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


def _handler_for(server: RangeServer) -> type[_Handler]:
    class Handler(_Handler):
        owner = server
    return Handler


def _etag_matches(header: str, etag: str) -> bool:
    """Whether an If-Match / If-None-Match list names ``etag`` (weak tags compared weakly)."""
    tags = [t.strip() for t in header.split(",")]
    return "*" in tags or any(t.removeprefix("W/") == etag for t in tags)


class _Unsatisfiable(Exception):
    """A range that starts past the object's end (answered 416)."""


def _parse_range(header: str, size: int) -> tuple[int, int] | None:
    """(first, last) byte of one satisfiable range; None to ignore the header (several ranges,
    bad syntax); _Unsatisfiable for a range of no byte of the object."""
    m = _RANGE.fullmatch(header.strip())
    if m is None or m.group(1) == m.group(2) == "":
        return None
    if m.group(1) == "":  # the last n bytes
        n = int(m.group(2))
        if n == 0 or size == 0:
            raise _Unsatisfiable
        return max(size - n, 0), size - 1
    first = int(m.group(1))
    last = int(m.group(2)) if m.group(2) else None
    if last is not None and last < first:
        return None
    if first >= size:
        raise _Unsatisfiable
    return first, size - 1 if last is None else min(last, size - 1)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go in separate writes: no 40 ms delays
    owner: RangeServer
    # The request being answered (set by _answer).
    _key: str
    _range: str | None
    _method: str
    _recorded: bool

    def setup(self) -> None:
        super().setup()
        with self.owner._lock:
            self.owner._connections.add(self.connection)
            self.owner._handlers.add(threading.current_thread())

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            with self.owner._lock:
                self.owner._connections.discard(self.connection)
                self.owner._handlers.discard(threading.current_thread())

    def log_message(self, format: str, *args: object) -> None:  # keep pytest's output clean
        pass

    def do_GET(self) -> None:
        self._answer(head=False)

    def do_HEAD(self) -> None:
        self._answer(head=True)

    def _start(self, status: int, headers: dict[str, str]) -> None:
        self._record(status)
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()

    def _write(self, body: bytes) -> None:
        self.owner._count_bytes(self._key, len(body))  # counted as handed to the socket
        self.wfile.write(body)
        self.wfile.flush()

    def _record(self, status: int) -> None:
        if not self._recorded:
            self._recorded = True
            self.owner._answered(self._method, self._key, self._range, status,
                                 {k.lower(): v for k, v in self.headers.items()}, self._query)

    def _send(self, status: int, headers: dict[str, str], body: bytes, head: bool) -> None:
        self._start(status, headers)
        if not head:
            self._write(body)

    def _hang_up(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _answer(self, head: bool) -> None:
        url = urlsplit(self.path)
        self._key = key = unquote(url.path).lstrip("/")
        self._query = url.query
        self._range = range_header = self.headers.get("Range")
        self._method = "HEAD" if head else "GET"
        self._recorded = False
        obj, fault, modifiers, allowed = self.owner._begin(key, url.query)
        try:
            if not allowed:
                body = b"signature does not match\n"
                return self._send(403, {"Content-Type": "text/plain",
                                        "Content-Length": str(len(body))}, body, head)
            self._respond(obj, fault, modifiers, range_header, head)
        finally:  # a request left unanswered (the server stopped during a stall): status 0
            self._record(0)

    def _respond(self, obj: _Object | None, fault: _Fault | None, modifiers: set[str],
                 range_header: str | None, head: bool) -> None:
        if fault is not None and fault.kind == "stall" and not fault.stall_body:
            if self.owner._stopping.wait(fault.seconds):
                return self._hang_up()
        if fault is not None and fault.kind == "status":
            body = f"injected {fault.status}\n".encode()
            return self._send(fault.status, {"Content-Type": "text/plain",
                                             "Content-Length": str(len(body))}, body, head)
        if obj is None:
            body = b"no such object\n"
            return self._send(404, {"Content-Type": "text/plain",
                                    "Content-Length": str(len(body))}, body, head)

        size = len(obj.data)
        headers = {"Content-Type": "application/octet-stream", "ETag": obj.etag,
                   "Last-Modified": formatdate(obj.last_modified, usegmt=True),
                   "Accept-Ranges": "bytes"}
        if_match = self.headers.get("If-Match")
        if "ignore_if_match" in modifiers:
            if_match = None
        if if_match is not None and not _etag_matches(if_match, obj.etag):
            body = b"precondition failed\n"
            return self._send(412, {"Content-Type": "text/plain",
                                    "Content-Length": str(len(body))}, body, head)
        if_none_match = self.headers.get("If-None-Match")
        if if_none_match is not None and _etag_matches(if_none_match, obj.etag):
            return self._send(304, headers, b"", head)

        status, first, last = 200, 0, size - 1
        if_range = self.headers.get("If-Range")
        if range_header is not None and "ignore_range" not in modifiers and (if_range is None
                                                              or if_range == obj.etag):
            try:
                parsed = _parse_range(range_header, size)
            except _Unsatisfiable:
                return self._send(416, {"Content-Range": f"bytes */{size}",
                                        "Content-Length": "0"}, b"", head)
            if parsed is not None:
                status, (first, last) = 206, parsed
                headers["Content-Range"] = f"bytes {first}-{last}/{size}"
        body = obj.data[first:last + 1]
        headers["Content-Length"] = str(len(body))
        if fault is not None and fault.kind == "wrong_total" and status == 206:
            headers["Content-Range"] = f"bytes {first}-{last}/{fault.value}"
        if fault is not None and fault.kind in ("claim_length", "endless", "longer") and not head:
            return self._hostile_body(fault, status, headers, body)

        if fault is not None and fault.kind in ("truncate", "stall") and not head:
            # The headers promise the whole body; part of it comes, then the connection is
            # closed (truncate) or goes quiet for a while before the rest (stall).
            self._start(status, headers)
            self._write(body[:fault.keep])
            if fault.kind == "truncate" or self.owner._stopping.wait(fault.seconds):
                return self._hang_up()
            return self._write(body[fault.keep:])
        return self._send(status, headers, body, head)

    def _hostile_body(self, fault: _Fault, status: int, headers: dict[str, str],
                      body: bytes) -> None:
        """The answers of claim_length, endless and longer: the headers lie about the body's
        length, or the body runs past its range; the connection is closed after."""
        if fault.kind == "longer":
            body += (bytes(range(256)) * (fault.value // 256 + 1))[:fault.value]
        headers["Content-Length"] = str(10**15 if fault.kind == "endless" else
                                        fault.value if fault.kind == "claim_length" else
                                        len(body))
        headers["Connection"] = "close"
        self._start(status, headers)
        try:
            self._write(body)
            if fault.kind == "endless":
                filler = b"\xa5" * 65536
                deadline = time.monotonic() + ENDLESS_SECONDS
                while time.monotonic() < deadline and not self.owner._stopping.is_set():
                    self._write(filler)
        except OSError:  # the client hung up: what a well-behaved client does here
            pass
        self._hang_up()
