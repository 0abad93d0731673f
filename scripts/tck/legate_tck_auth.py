"""A pytest plugin for running the A2A TCK against `legate serve` with its bearer token.

The TCK (a2aproject/a2a-tck, 1.0-dev) sends no credentials: its docs mention A2A_AUTH_*
variables that its code does not read. Loaded with `-p legate_tck_auth` (this directory on
PYTHONPATH), this plugin adds `Authorization: Bearer $LEGATE_A2A_TOKEN` to every request the
TCK's httpx clients send that carries no Authorization header of its own, so the TCK runs
against Legate's default configuration (auth = "token"). It changes nothing else.
"""

from __future__ import annotations

import os

import httpx


_TOKEN = os.environ.get("LEGATE_A2A_TOKEN", "").strip()
_send = httpx.Client.send


def _send_with_token(self: httpx.Client, request: httpx.Request, *args, **kwargs):  # type: ignore[no-untyped-def]
    if _TOKEN and "authorization" not in request.headers:
        request.headers["Authorization"] = f"Bearer {_TOKEN}"
    return _send(self, request, *args, **kwargs)


httpx.Client.send = _send_with_token  # type: ignore[method-assign]
