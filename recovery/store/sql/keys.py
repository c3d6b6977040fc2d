"""The gateway's keys in the ``api_keys`` table: created with a secret shown once, kept
as a salted scrypt hash, verified in constant time, revoked by name (``toolsafe keys``,
docs/gateway.md); the records and refusals are ``toolsafe.recovery.store.keys``'s."""

from __future__ import annotations

import hmac
import secrets
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, Row, insert, select, update
from sqlalchemy.exc import IntegrityError

from toolsafe.recovery.schema import api_keys
from toolsafe.recovery.store.keys import (
    NAME_PATTERN,
    NAMESPACE_PATTERN,
    SCOPES,
    TOKEN_PATTERN,
    TOKEN_PREFIX,
    ApiKey,
    CreatedKey,
    KeyRefused,
    hash_secret,
)

__all__ = ["KeyStore"]


def _key(row: Row[Any]) -> ApiKey:
    return ApiKey(
        key_id=row.key_id,
        name=row.name,
        scope=row.scope,
        namespace=row.namespace,
        created_at=row.created_at,
        revoked_at=row.revoked_at,
    )


class KeyStore:
    """The ``api_keys`` table; each method is one short transaction."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def create(self, name: str, scope: str, namespace: str | None, *, now: datetime) -> CreatedKey:
        """A new key; an agent key without a namespace gets its name as namespace."""
        if not NAME_PATTERN.fullmatch(name):
            raise KeyRefused(
                "BAD_KEY_NAME", f"key name {name!r}: 1-200 letters, digits and _ . : @ -"
            )
        if scope not in SCOPES:
            raise KeyRefused("BAD_SCOPE", f"scope must be agent or operator, not {scope!r}")
        if scope == "agent" and namespace is None:
            namespace = name
        if namespace is not None and not NAMESPACE_PATTERN.fullmatch(namespace):
            raise KeyRefused(
                "BAD_NAMESPACE",
                f"namespace {namespace!r}: 1-100 letters, digits and _ . : -, no '/'",
            )
        key_id = secrets.token_hex(8)
        secret = secrets.token_urlsafe(32)
        salt = secrets.token_bytes(16)
        values = {
            "key_id": key_id,
            "name": name,
            "scope": scope,
            "namespace": namespace,
            "salt": salt.hex(),
            "secret_hash": hash_secret(secret, salt),
            "created_at": now,
            "revoked_at": None,
        }
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(api_keys).values(values))
        except IntegrityError:
            raise KeyRefused("KEY_EXISTS", f"a key named {name!r} exists already") from None
        created = ApiKey(key_id, name, scope, namespace, now, None)
        return CreatedKey(created, f"{TOKEN_PREFIX}{key_id}_{secret}")

    def list(self) -> list[ApiKey]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(api_keys).order_by(api_keys.c.id)).all()
        return [_key(row) for row in rows]

    def revoke(self, name: str, *, now: datetime) -> ApiKey:
        with self.engine.begin() as conn:
            row = conn.execute(
                update(api_keys)
                .where(api_keys.c.name == name, api_keys.c.revoked_at.is_(None))
                .values(revoked_at=now)
                .returning(*api_keys.c)
            ).first()
        if row is None:
            raise KeyRefused("NO_SUCH_KEY", f"no active key named {name!r}")
        return _key(row)

    def verify(self, token: str) -> ApiKey | None:
        """The active key the token belongs to, or None (unknown, wrong or revoked)."""
        match = TOKEN_PATTERN.fullmatch(token)
        if match is None:
            return None
        key_id, secret = match.groups()
        with self.engine.connect() as conn:
            row = conn.execute(select(api_keys).where(api_keys.c.key_id == key_id)).first()
        if row is None or row.revoked_at is not None:
            return None
        expected = hash_secret(secret, bytes.fromhex(row.salt))
        if not hmac.compare_digest(expected, row.secret_hash):
            return None
        return _key(row)

    def active(self, key_id: str) -> bool:
        """The key exists and is not revoked (the cheap re-check behind a cache)."""
        with self.engine.connect() as conn:
            row = conn.execute(
                select(api_keys.c.revoked_at).where(api_keys.c.key_id == key_id)
            ).first()
        return row is not None and row.revoked_at is None
