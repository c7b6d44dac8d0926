"""The page server's guards: loopback by default, a per-server action token, same-origin only.

- Listening beyond loopback needs an explicit flag and prints a warning (``check_bind``).
- Every request must name this server in ``Host`` (a DNS-rebinding page cannot read runs).
- Actions (POST) need ``--allow-actions``, the server's token in the ``X-Soloist-Token``
  header (never a cookie, so a cross-site form cannot carry it), an ``Origin`` equal to
  this server, and a JSON body (a cross-site ``<form>`` cannot send one).
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
from collections.abc import Mapping

from cluster.cli.ui.exceptions import ActionsDisabled, BadToken, CrossSiteRequest, UnsafeBind

__all__ = ["Guard", "TOKEN_ENV", "TOKEN_HEADER", "check_bind", "is_loopback"]

#: Set this to choose the action token instead of a random one.
TOKEN_ENV = "SOLOIST_UI_TOKEN"
TOKEN_HEADER = "x-soloist-token"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, *, public_ok: bool) -> str | None:
    """None for a loopback address; the warning to print for another one when allowed."""
    if is_loopback(host):
        return None
    if not public_ok:
        raise UnsafeBind(
            f"--host {host} would serve runs beyond this machine; pass --i-know-this-is-public to do it anyway "
            "(anyone who can reach the port can read every run's state)"
        )
    return (f"WARNING: serving on {host}, which is not loopback: anyone who can reach this port can read every run's "
            "state (actions, if allowed, still need the token)")


class Guard:
    """Decides which requests the server answers. ``port`` is the port it really listens on."""

    def __init__(self, *, host: str, port: int, allow_actions: bool, token: str | None = None,
                 environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self.allow_actions = allow_actions
        chosen = token or env.get(TOKEN_ENV) or ""
        self.token: str | None = (chosen or secrets.token_urlsafe(24)) if allow_actions else None
        self.token_from_env = allow_actions and not token and bool(env.get(TOKEN_ENV))
        self._host = host
        self.set_port(port)

    def set_port(self, port: int) -> None:
        self.port = port
        names = {self._host, "127.0.0.1", "localhost", "[::1]"} if is_loopback(self._host) else {self._host}
        self._hosts = {f"{n}:{port}" for n in names} | ({n for n in names} if port == 80 else set())

    def check_host(self, host_header: str | None) -> None:
        """``Host`` must be this server (refuses DNS-rebinding pages)."""
        if not host_header or host_header.lower() not in self._hosts:
            raise CrossSiteRequest(f"this server answers requests for {', '.join(sorted(self._hosts))}, not {host_header!r}")

    def check_action(self, headers: Mapping[str, str]) -> None:
        """Raise unless ``headers`` (lower-case names) make a same-origin, token-bearing action."""
        if not self.allow_actions or self.token is None:
            raise ActionsDisabled("this server is read-only; restart `soloist ui` with --allow-actions to act on runs")
        self.check_host(headers.get("host"))
        origin = headers.get("origin")
        if origin is None or origin.lower() not in {f"http://{h}" for h in self._hosts}:
            raise CrossSiteRequest(f"actions must come from this server's own page (Origin {origin!r} refused)")
        if headers.get("sec-fetch-site") not in (None, "same-origin"):
            raise CrossSiteRequest(f"actions must come from this server's own page (Sec-Fetch-Site {headers.get('sec-fetch-site')!r})")
        given = headers.get(TOKEN_HEADER)
        if not given or not hmac.compare_digest(given.encode(), self.token.encode()):
            raise BadToken("the action token is missing or wrong: paste the token `soloist ui` printed into the page")
        if not (headers.get("content-type") or "").startswith("application/json"):
            raise CrossSiteRequest("actions take a JSON body (Content-Type: application/json)")
