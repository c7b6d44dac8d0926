"""A scripted OpenAI-compatible chat-completions server on loopback, for the LLM tests.

Each request to ``POST /v1/chat/completions`` takes the next scripted reply (status,
headers, JSON body, or ``hang`` to never answer until the server stops) and is recorded
with its headers and JSON body, so tests assert what was sent as well as what came back.

With ``limit=TokenLimit(...)`` it also behaves like a rate-limited provider: requests not
scripted are answered by ``auto_reply`` (usage: the prompt's characters / 4 and
``max_tokens``), each counted against a sliding window of tokens at its arrival, and one
that would exceed the window's tokens is refused with 429 (counted in ``refused``). It
counts the requests in flight and their peak (``max_in_flight``). ``auto=True`` answers
requests not scripted the same way without a limit; ``gate`` (an event) holds every such
answer until it is set.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def completion(content: str = "", *, tool_calls: list[dict[str, Any]] | None = None, model: str = "test-model",
               usage: tuple[int, int] = (11, 7)) -> dict[str, Any]:
    """A chat-completions response body."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
            for c in tool_calls
        ]
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if tool_calls else "stop"}],
        "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)},
    }


def prompt_tokens(body: dict[str, Any]) -> int:
    """The server's count of a request's prompt: its messages' characters / 4, rounded up."""
    return math.ceil(sum(len(m.get("content") or "") for m in body.get("messages", [])) / 4)


@dataclass
class TokenLimit:
    """A provider's tokens-per-window limit, counted at each request's arrival."""

    tokens: int
    window_s: float
    # (arrival, tokens) of the requests accepted within the last window.
    accepted: deque[tuple[float, int]] = field(default_factory=deque)

    def admit(self, tokens: int, now: float) -> bool:
        while self.accepted and self.accepted[0][0] <= now - self.window_s:
            self.accepted.popleft()
        if sum(t for _, t in self.accepted) + tokens > self.tokens:
            return False
        self.accepted.append((now, tokens))
        return True


class Reply:
    def __init__(self, status: int = 200, body: Any = None, headers: dict[str, str] | None = None, hang: bool = False) -> None:
        self.status, self.body, self.headers, self.hang = status, body, headers or {}, hang


class ChatServer:
    """Serves scripted replies; ``requests`` holds ``{path, headers, body}`` of each request."""

    def __init__(self, *, limit: TokenLimit | None = None, output_tokens: int = 8, auto: bool = False,
                 gate: threading.Event | None = None) -> None:
        self.replies: list[Reply] = []
        self.requests: list[dict[str, Any]] = []
        self.hung_replies_released = threading.Event()
        self.limit = limit
        self.auto = auto or limit is not None
        self.gate = gate
        self.output_tokens = output_tokens
        self.refused = 0
        self.tokens_served = 0
        self.in_flight = 0
        self.max_in_flight = 0
        # Arrival times (monotonic) of the requests answered 200, for the wall time at the server.
        self.served_at: list[float] = []
        self.counting = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                body = json.loads(raw)
                owner.requests.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
                                       "body": body})
                with owner.counting:
                    owner.in_flight += 1
                    owner.max_in_flight = max(owner.max_in_flight, owner.in_flight)
                try:
                    self._answer(owner.reply_to(body))
                finally:
                    with owner.counting:
                        owner.in_flight -= 1

            def _answer(self, reply: Reply) -> None:
                if reply.hang:
                    owner.hung_replies_released.wait()
                    return
                data = json.dumps(reply.body if reply.body is not None else {}).encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def reply_to(self, body: dict[str, Any]) -> Reply:
        if self.replies:
            return self.replies.pop(0)
        if not self.auto:
            return Reply(500, {"error": "no reply scripted"})
        if self.gate is not None:
            self.gate.wait()
        usage = (prompt_tokens(body), min(self.output_tokens, body.get("max_tokens") or self.output_tokens))
        with self.counting:
            now = time.monotonic()
            if self.limit is not None and not self.limit.admit(sum(usage), now):
                self.refused += 1
                return Reply(429, {"error": {"message": "rate limit: tokens per window exceeded"}},
                             headers={"Retry-After": "0"})
            self.tokens_served += sum(usage)
            self.served_at.append(now)
        return Reply(body=completion("ok", model=body.get("model", "test-model"), usage=usage))

    def __enter__(self) -> "ChatServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.hung_replies_released.set()
        self._httpd.shutdown()
        self._httpd.server_close()
