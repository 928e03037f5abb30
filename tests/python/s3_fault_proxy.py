"""An HTTP proxy in front of an S3 server (moto's, s3_server.py) for the write fault tests: every
request is forwarded as it came (signature, headers and body untouched: the server checks what
the client signed for the proxy's host, as moto does not check signatures) and logged with the
status answered, and chosen requests are answered with a scripted status instead of being
forwarded (a 503 on one part of a multipart upload).

Not a test file: tests import it::

    proxy = S3FaultProxy(server.endpoint)
    proxy.fail_part(2, 503, times=1)
    ... storage_options=dict(server.storage_options(), endpoint=proxy.endpoint) ...
    proxy.stop()
"""
from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import NamedTuple
from urllib.parse import parse_qs, urlsplit


class Request(NamedTuple):
    method: str
    path: str   # with its query
    status: int

    @property
    def kind(self) -> str:
        """"create" (start a multipart upload), "part", "complete", "abort", or the method."""
        q = parse_qs(urlsplit(self.path).query, keep_blank_values=True)
        if self.method == "POST" and "uploads" in q:
            return "create"
        if self.method == "PUT" and "partNumber" in q:
            return "part"
        if self.method == "POST" and "uploadId" in q:
            return "complete"
        if self.method == "DELETE" and "uploadId" in q:
            return "abort"
        return self.method


class S3FaultProxy:
    def __init__(self, target: str):
        parts = urlsplit(target)
        self._target = (parts.hostname, parts.port)
        self._lock = threading.Lock()
        self._log: list[Request] = []
        self._faults: dict[int, list[int | None]] = {}  # part number -> [status, times left]
        self._stalls: dict[str, float] = {}  # request kind -> seconds, once
        self._seen: list[str] = []  # the kinds of the requests received, as they arrive
        self._stopped = threading.Event()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _forward(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                kind = Request(self.command, self.path, 0).kind
                with proxy._lock:
                    proxy._seen.append(kind)
                    stall = proxy._stalls.pop(kind, 0.0)
                if stall:
                    proxy._stopped.wait(stall)
                status = proxy._fault_for(self.command, self.path)
                # Each answer is logged before it is sent: once the client has it, the log
                # holds it.
                if status is not None:
                    proxy._record(Request(self.command, self.path, status))
                    self.send_response(status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                conn = http.client.HTTPConnection(*proxy._target, timeout=30)
                try:
                    headers = {k: v for k, v in self.headers.items()
                               if k.lower() not in ("connection", "keep-alive")}
                    conn.request(self.command, self.path, body=body, headers=headers)
                    answer = conn.getresponse()
                    data = answer.read()
                finally:
                    conn.close()
                proxy._record(Request(self.command, self.path, answer.status))
                self.send_response(answer.status)
                for k, v in answer.getheaders():
                    if k.lower() not in ("connection", "transfer-encoding", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"

    def fail_part(self, number: int, status: int = 503, times: int | None = 1) -> None:
        """Answer ``status`` to the upload of part ``number`` of any multipart upload, ``times``
        times (None: always)."""
        with self._lock:
            self._faults[number] = [status, times]

    def stall(self, kind: str, seconds: float) -> None:
        """Hold the next request of ``kind`` (Request.kind: "create", "part", ...) ``seconds``
        before forwarding it (stop() releases it)."""
        with self._lock:
            self._stalls[kind] = seconds

    def seen(self) -> list[str]:
        """The kinds of the requests received so far, answered or not."""
        with self._lock:
            return list(self._seen)

    def _fault_for(self, method: str, path: str) -> int | None:
        q = parse_qs(urlsplit(path).query)
        if method != "PUT" or "partNumber" not in q:
            return None
        with self._lock:
            fault = self._faults.get(int(q["partNumber"][0]))
            if not fault or fault[1] == 0:
                return None
            if fault[1] is not None:
                fault[1] -= 1
            return fault[0]

    def _record(self, r: Request) -> None:
        with self._lock:
            self._log.append(r)

    def log(self) -> list[Request]:
        with self._lock:
            return list(self._log)

    def stop(self) -> None:
        self._stopped.set()
        self._server.shutdown()
        self._server.server_close()
