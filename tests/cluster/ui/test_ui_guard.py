"""The page server's guards, without a server: bind address, Host, Origin, token, body type."""

from __future__ import annotations

import pytest

from cluster.cli.ui import TOKEN_ENV, ActionsDisabled, BadToken, CrossSiteRequest, Guard, UnsafeBind, check_bind


def _headers(guard: Guard, **extra: str) -> dict[str, str]:
    return {"host": f"127.0.0.1:{guard.port}", "origin": f"http://127.0.0.1:{guard.port}",
            "content-type": "application/json", "x-soloist-token": guard.token or "", **extra}


def test_loopback_binds_quietly_and_anything_else_needs_the_explicit_flag() -> None:
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        assert check_bind(host, public_ok=False) is None
    for host in ("0.0.0.0", "192.168.1.10", "::"):
        with pytest.raises(UnsafeBind, match="--i-know-this-is-public"):
            check_bind(host, public_ok=False)
        assert "WARNING" in (check_bind(host, public_ok=True) or "")


def test_a_read_only_server_has_no_token_and_refuses_every_action() -> None:
    guard = Guard(host="127.0.0.1", port=8470, allow_actions=False, environ={TOKEN_ENV: "set-but-unused"})
    assert guard.token is None
    with pytest.raises(ActionsDisabled, match="--allow-actions"):
        guard.check_action(_headers(guard, **{"x-soloist-token": "set-but-unused"}))


def test_the_token_is_random_per_server_unless_the_environment_sets_it() -> None:
    a = Guard(host="127.0.0.1", port=1, allow_actions=True, environ={})
    b = Guard(host="127.0.0.1", port=1, allow_actions=True, environ={})
    assert a.token and b.token and a.token != b.token and len(a.token) >= 24
    chosen = Guard(host="127.0.0.1", port=1, allow_actions=True, environ={TOKEN_ENV: "from-env"})
    assert chosen.token == "from-env" and chosen.token_from_env


def test_an_action_passes_only_with_token_origin_host_and_json() -> None:
    guard = Guard(host="127.0.0.1", port=8470, allow_actions=True, environ={})
    guard.check_action(_headers(guard))
    guard.check_action(_headers(guard, host="localhost:8470", origin="http://localhost:8470"))
    refused = [
        (dict(_headers(guard), **{"x-soloist-token": ""}), BadToken),
        (dict(_headers(guard), **{"x-soloist-token": guard.token + "x"}), BadToken),
        (dict(_headers(guard), origin="http://evil.example"), CrossSiteRequest),
        (dict(_headers(guard), origin="http://127.0.0.1:9999"), CrossSiteRequest),
        (dict(_headers(guard), host="evil.example:8470"), CrossSiteRequest),
        (dict(_headers(guard), **{"sec-fetch-site": "cross-site"}), CrossSiteRequest),
        (dict(_headers(guard), **{"content-type": "application/x-www-form-urlencoded"}), CrossSiteRequest),
    ]
    no_origin = _headers(guard)
    del no_origin["origin"]
    refused.append((no_origin, CrossSiteRequest))
    for headers, error in refused:
        with pytest.raises(error):
            guard.check_action(headers)


def test_reads_answer_only_requests_addressed_to_this_server() -> None:
    guard = Guard(host="127.0.0.1", port=8470, allow_actions=False)
    guard.check_host("127.0.0.1:8470")
    guard.check_host("localhost:8470")
    for host in (None, "", "127.0.0.1", "evil.example:8470", "rebind.attacker.test:8470"):
        with pytest.raises(CrossSiteRequest):
            guard.check_host(host)
