"""The in-process doubles of ``--dry-run``: for an HTTP toolkit adapter, a real HTTP
server on 127.0.0.1 that answers as the adapter's declaration says its service does
(records de-duplicated by the key where the adapter sends it, the lookup in its declared
shape); for a ``@tool`` function, a ledger in place of the function and its lookup. What
a dry run proves is the adapter's classification; only a run against staging proves the
declaration matches the service."""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from toolsafe.adapters.function import FunctionAdapter
from toolsafe.adapters.http import HttpAdapter


class _Ledger:
    """Records by operation_ref, one per key, behind a lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.records: dict[str, list[dict[str, Any]]] = {}
        self._ids = itertools.count(1)

    def store(self, ref: str | None, fields: Mapping[str, Any], id_field: str) -> dict[str, Any]:
        with self.lock:
            held = self.records.setdefault(ref or "", [])
            if held and ref:
                return held[0]
            record = {**fields, id_field: f"dbl_{next(self._ids):06d}", "operation_ref": ref}
            held.append(record)
            return record

    def find(self, ref: str) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.records.get(ref, []))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _DoubleServer

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _send(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        adapter = self.server.adapter
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        param = adapter.lookup_param
        ref = query.get(param, [""])[0] if param else unquote(parts.path.rsplit("/", 1)[-1])
        found = self.server.ledger.find(ref)
        if adapter.lookup_returns == "list":
            listed: object = found
            if adapter.lookup_list_key:
                listed = {adapter.lookup_list_key: found}
            self._send(200, listed)
            return
        if not found:
            codes = sorted(adapter.lookup_not_found_codes or {"NOT_FOUND"})
            self._send(404, {"error": {"code": codes[0]}})
            return
        body: dict[str, Any] = (
            {adapter.record_key: found[0]} if adapter.record_key else dict(found[0])
        )
        if adapter.lookup_count_field:
            body[adapter.lookup_count_field] = len(found)
        self._send(200, body)

    def _write(self) -> None:
        adapter = self.server.adapter
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            payload = json.loads(raw or b"{}")
        except ValueError:
            payload = {}
        fields = payload if isinstance(payload, dict) else {}
        place = adapter.key_place()
        if place.where == "header":
            ref = self.headers.get(place.name)
        elif place.where == "body":
            value: object = fields
            for part in place.name.split("."):
                value = value.get(part) if isinstance(value, dict) else None
            ref = value if isinstance(value, str) else None
        else:
            ref = parse_qs(urlsplit(self.path).query).get(place.name, [None])[0]
        record = self.server.ledger.store(ref, fields, adapter.evidence_field or "id")
        self._send(201, {adapter.record_key: record} if adapter.record_key else record)

    do_POST = do_PUT = do_PATCH = do_DELETE = _write


class _DoubleServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, adapter: HttpAdapter[Any]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.adapter = adapter
        self.ledger = _Ledger()


class HttpDouble:
    """``with HttpDouble(adapter) as double``: ``double.url`` answers as the adapter's
    declaration says its service does."""

    def __init__(self, adapter: HttpAdapter[Any]) -> None:
        self._server = _DoubleServer(adapter)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def requests(self) -> int:
        with self._server.ledger.lock:
            return sum(len(held) for held in self._server.ledger.records.values())

    def __enter__(self) -> HttpDouble:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def function_double(adapter: FunctionAdapter) -> FunctionAdapter:
    """``adapter`` with its function and lookup replaced by an in-process ledger that
    keeps one record per operation_ref (its evidence in the declared field)."""
    ledger = _Ledger()
    id_field = adapter.evidence if isinstance(adapter.evidence, str) else "id"
    ref_param = adapter.ref_param

    def call(**arguments: Any) -> dict[str, Any]:
        ref = arguments.get(ref_param) if ref_param else None
        return ledger.store(ref if isinstance(ref, str) else None, {}, id_field)

    return adapter.replaced(call, ledger.find if adapter.has_lookup else None)


__all__ = ["HttpDouble", "function_double"]
