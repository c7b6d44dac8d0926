"""A scripted OpenAI-compatible chat-completions server that counts what reaches it.

Each ``POST /v1/chat/completions`` is answered by a script from the request itself: the
conversation's *label* is its first user message, its *step* the number of assistant
messages it carries (a model request per step). The server counts every request by
``(label, step)`` as it arrives, and the requests in flight (arrived, not yet answered) and
their peak; requests the test asks to ``hold`` wait for ``release`` before they are
answered. Counting here, at the socket, is what the tests prove their guarantees with.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["CountingServer", "completion"]

#: (label, step, messages) -> the reply's message: ``{"content": ...}`` or ``{"tool_calls": [...]}``.
Script = Callable[[str, int, list[dict[str, Any]]], dict[str, Any]]


def completion(message: dict[str, Any], *, usage: tuple[int, int] = (11, 7)) -> dict[str, Any]:
    """A chat-completions response body for an assistant ``message``: ``content`` and/or
    ``tool_calls`` as ``[(call id, tool name, arguments dict), ...]``."""
    body: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    calls = message.get("tool_calls") or []
    if calls:
        body["tool_calls"] = [{"id": call_id, "type": "function",
                               "function": {"name": name, "arguments": json.dumps(arguments)}}
                              for call_id, name, arguments in calls]
    return {"id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": "test-model",
            "choices": [{"index": 0, "message": body, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}}


def label_and_step(messages: list[dict[str, Any]]) -> tuple[str, int]:
    label = next((str(m.get("content")) for m in messages if m.get("role") == "user"), "")
    return label, sum(1 for m in messages if m.get("role") == "assistant")


class CountingServer:
    """Serves ``script`` on 127.0.0.1 (a free port); ``base_url`` is the OpenAI base URL.

    ``counts[(label, step)]``: requests received; ``in_flight`` / ``peak``: requests between
    arrival and answer, now and at most; ``hold(predicate)``: requests whose ``(label, step)``
    satisfy it wait until ``release()``.
    """

    def __init__(self, script: Script) -> None:
        self.counts: Counter[tuple[str, int]] = Counter()
        self.in_flight = 0
        self.peak = 0
        self.bodies: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._held: Callable[[str, int], bool] = lambda label, step: False
        self._release = threading.Event()
        self._script = script
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                with owner.serving(body) as reply:
                    data = json.dumps(reply).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @contextlib.contextmanager
    def serving(self, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """One request: counted on arrival, in flight until its answer is written."""
        label, step = label_and_step(body.get("messages", []))
        with self._lock:
            self.counts[(label, step)] += 1
            self.bodies.append(body)
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        try:
            if self._held(label, step):
                self._release.wait()
            yield completion(self._script(label, step, body["messages"]))
        finally:
            with self._lock:
                self.in_flight -= 1

    def hold(self, predicate: Callable[[str, int], bool]) -> None:
        self._held = predicate

    def release(self) -> None:
        self._release.set()

    def count(self, label: str, step: int) -> int:
        with self._lock:
            return self.counts[(label, step)]

    def __enter__(self) -> CountingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._release.set()
        self._httpd.shutdown()
        self._httpd.server_close()
