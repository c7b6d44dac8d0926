"""Store locations given as URLs: which strings are database URLs, and their printable form.

A URL is a store key like a path (the orchestrator's hosts share one store object per key),
but it may carry a password: everything that logs or reports a store names it by
:func:`redact`, never by the URL itself.
"""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["POSTGRES_SCHEMES", "is_postgres_url", "redact"]

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
_SECRET_PARAMS = {"password", "sslpassword"}


def is_postgres_url(spec: Any) -> bool:
    """True for a ``postgresql://`` or ``postgres://`` string (a PostgreSQL store)."""
    return isinstance(spec, str) and spec.lower().startswith(POSTGRES_SCHEMES)


def redact(location: str | os.PathLike[str]) -> str:
    """``location`` with any password replaced by ``***`` (paths come back unchanged)."""
    text = os.fspath(location)
    if "://" not in text:
        return text
    try:
        parts = urlsplit(text)
        netloc = parts.netloc
        if "@" in netloc:
            credentials, host = netloc.rsplit("@", 1)
            user = credentials.split(":", 1)[0]
            netloc = f"{user}:***@{host}" if ":" in credentials else f"{user}@{host}"
        query = parts.query
        if query:
            pairs = [(k, "***" if k.lower() in _SECRET_PARAMS else v) for k, v in parse_qsl(query, keep_blank_values=True)]
            query = urlencode(pairs, safe="=-/:*,")
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    except ValueError:  # not even a URL: hide anything that looks like user:password@
        return re.sub(r"//([^:/@]*):[^@]*@", r"//\1:***@", text)
