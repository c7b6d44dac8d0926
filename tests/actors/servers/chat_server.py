"""A scripted OpenAI-compatible chat-completions server on loopback, for the LLM tests.

Each request to ``POST /v1/chat/completions`` takes the next scripted reply (status,
headers, JSON body, or ``hang`` to never answer until the server stops) and is recorded
with its headers and JSON body, so tests assert what was sent as well as what came back.
"""

from __future__ import annotations

import json
import threading
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


class Reply:
    def __init__(self, status: int = 200, body: Any = None, headers: dict[str, str] | None = None, hang: bool = False) -> None:
        self.status, self.body, self.headers, self.hang = status, body, headers or {}, hang


class ChatServer:
    """Serves scripted replies; ``requests`` holds ``{path, headers, body}`` of each request."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.requests: list[dict[str, Any]] = []
        self.hung_replies_released = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                owner.requests.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
                                       "body": json.loads(raw)})
                reply = owner.replies.pop(0) if owner.replies else Reply(500, {"error": "no reply scripted"})
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

    def __enter__(self) -> "ChatServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.hung_replies_released.set()
        self._httpd.shutdown()
        self._httpd.server_close()
