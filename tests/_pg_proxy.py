"""A TCP proxy in front of a PostgreSQL server that can lose one commit's acknowledgement.

:class:`CommitCutter` forwards every connection byte for byte. Once armed, the next
``COMMIT`` a client sends reaches the server (so the transaction commits) and then the
connection is cut before the server's answer comes back: the client sees a lost connection
exactly where it cannot know whether its commit happened - the case the store's retries with
the same request ids must recognise as done. Armed with ``deliver=False``, the ``COMMIT``
never reaches the server (the transaction rolls back) and the connection is cut all the same:
to the client the two cases look alike. While ``hold()`` lasts, new connections are refused,
so a client's retry waits for ``release()`` (another client acts in between).
"""

from __future__ import annotations

import socket
import threading

__all__ = ["CommitCutter"]

_COMMIT = b"Q\x00\x00\x00\x0bCOMMIT\x00"  # a simple-protocol query message: "COMMIT"


class CommitCutter:
    """Listens on a free local port and forwards to ``127.0.0.1:server_port``."""

    def __init__(self, server_port: int) -> None:
        self._server_port = server_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._armed = False  # the next COMMIT seen loses its answer
        self._deliver = True  # ... after reaching the server (else it never does)
        self._holding = False  # new connections are refused
        self.cuts = 0  # connections cut after their COMMIT reached the server
        self.cut_done = threading.Event()
        threading.Thread(target=self._accept, daemon=True, name="commit-cutter").start()

    def arm(self, *, deliver: bool = True) -> None:
        with self._lock:
            self._armed = True
            self._deliver = deliver
        self.cut_done.clear()

    def hold(self) -> None:
        """Refuse new connections until ``release()``."""
        with self._lock:
            self._holding = True

    def release(self) -> None:
        with self._lock:
            self._holding = False

    def url(self, url: str) -> str:
        """``url`` (of the server) through this proxy."""
        return url.replace(f":{self._server_port}/", f":{self.port}/", 1)

    def close(self) -> None:
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                holding = self._holding
            if holding:
                _close(client)
                continue
            server = socket.create_connection(("127.0.0.1", self._server_port))
            doomed = threading.Event()
            threading.Thread(target=self._to_server, args=(client, server, doomed), daemon=True).start()
            threading.Thread(target=self._to_client, args=(server, client, doomed), daemon=True).start()

    def _to_server(self, client: socket.socket, server: socket.socket, doomed: threading.Event) -> None:
        try:
            while data := client.recv(65536):
                with self._lock:
                    if self._armed and _COMMIT in data:
                        self._armed = False
                        doomed.set()
                        if not self._deliver:  # never reaches the server: it rolls back
                            self.cuts += 1
                            self.cut_done.set()
                            break
                server.sendall(data)
        except OSError:
            pass  # the other pump closed the sockets
        finally:
            _close(client, server)

    def _to_client(self, server: socket.socket, client: socket.socket, doomed: threading.Event) -> None:
        try:
            while data := server.recv(65536):
                if doomed.is_set():  # the server answered the COMMIT: that answer is lost
                    with self._lock:
                        self.cuts += 1
                    self.cut_done.set()
                    break
                client.sendall(data)
        except OSError:
            pass  # the other pump closed the sockets
        finally:
            _close(client, server)


def _close(*sockets: socket.socket) -> None:
    for sock in sockets:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already shut
        sock.close()
