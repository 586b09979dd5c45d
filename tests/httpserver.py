"""A local HTTP server on 127.0.0.1 for download tests: serves in-memory files, honours Range
requests, and can fail on purpose (drop the connection part-way, answer 503 or 404); and the
archives it serves, built in memory."""

from __future__ import annotations

import io
import tarfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Files:
    content: dict[str, bytes] = field(default_factory=dict)
    # path → list of failures for the next requests: "drop" (half the body, then close), or an HTTP status
    failures: dict[str, list[str | int]] = field(default_factory=dict)
    requests: list[tuple[str, str | None]] = field(default_factory=list)   # (path, Range header)

    def count(self, path: str) -> int:
        return sum(p == path for p, _ in self.requests)


def _handler(files: Files) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            path = self.path
            files.requests.append((path, self.headers.get("Range")))
            failure = files.failures.get(path, []).pop(0) if files.failures.get(path) else None
            if isinstance(failure, int) or path not in files.content:
                self.send_error(failure if isinstance(failure, int) else 404)
                return
            body = files.content[path]
            start = 0
            rng = self.headers.get("Range")
            if rng and rng.startswith("bytes="):
                start = int(rng[6:].split("-")[0])
                if start >= len(body):
                    self.send_error(416)
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
            else:
                self.send_response(200)
            rest = body[start:]
            self.send_header("Content-Length", str(len(rest)))
            self.end_headers()
            if failure == "drop":
                self.wfile.write(rest[: len(rest) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(rest)

    return Handler


@contextmanager
def serve(files: Files) -> Iterator[str]:
    """Serve `files` on 127.0.0.1 (a free port); yields the base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(files))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def make_tgz(members: dict[str, bytes]) -> bytes:
    """A gzipped tar archive holding `members` (name → content)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()
