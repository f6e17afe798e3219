"""Alertmanager's webhook receiver on the controller (test double side): the lab's Alertmanager posts to
http://<lab gateway>:19093/alerts (group_vars/lab/monitoring.yml monitoring_alertmanager_webhook_url).

`Receiver(address, port)` listens on that address only, records every notification (the time it arrived, monotonic,
and Alertmanager's JSON body: webhook version 4, `alerts` each with status, labels, annotations) and lets a test wait
for the first notification that matches.
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    def __init__(self, address: str, port: int = 19093, path: str = "/alerts"):
        self.path = path
        self.notifications: list[tuple[float, dict]] = []
        self._cond = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                ok = self.path == receiver.path
                if ok:
                    with receiver._cond:
                        receiver.notifications.append((time.monotonic(), json.loads(body or b"{}")))
                        receiver._cond.notify_all()
                self.send_response(200 if ok else 404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_):
                pass

        self._server = ThreadingHTTPServer((address, port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "Receiver":
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._server.shutdown()
        self._server.server_close()

    def alerts(self) -> list[tuple[float, dict]]:
        """(arrival, alert) for every alert of every notification so far."""
        with self._cond:
            return [(t, a) for t, body in self.notifications for a in body.get("alerts", [])]

    def wait_for(self, match, timeout: float) -> tuple[float, dict]:
        """The first (arrival, alert) with match(alert) true; AssertionError with what came when none does in time."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for t, body in self.notifications:
                    for alert in body.get("alerts", []):
                        if match(alert):
                            return t, alert
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no matching alert in {timeout:.0f} s; received: {self.notifications}")
                self._cond.wait(left)
