"""The gateway's keys: created with a secret shown once, kept as a salted scrypt hash,
verified in constant time, revoked by name (``toolsafe keys``, docs/gateway.md)."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

from sqlalchemy import Engine, Row, insert, select, update
from sqlalchemy.exc import IntegrityError

from toolsafe.adapters.errors import ToolsafeError
from toolsafe.recovery.schema import api_keys

Scope = Literal["agent", "operator"]
SCOPES: Final[tuple[Scope, ...]] = ("agent", "operator")
TOKEN_PREFIX: Final = "tsk_"  # noqa: S105 - a prefix, not a secret
# scrypt's interactive-login parameters (16 MiB, ~50 ms): a stolen table costs dearly.
SCRYPT_N: Final = 2**14
SCRYPT_R: Final = 8
SCRYPT_P: Final = 1
NAMESPACE_PATTERN: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,99}$")
NAME_PATTERN: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@\-]{0,199}$")
_TOKEN = re.compile(r"^tsk_([0-9a-f]{16})_([A-Za-z0-9_\-]{20,100})$")


KEY_REFUSALS: Final[Mapping[str, str]] = {
    "BAD_KEY_NAME": "a key's name is empty, too long or not printable",
    "BAD_SCOPE": "a key's scope is neither agent nor operator",
    "BAD_NAMESPACE": "a key's namespace is not a usable operation_ref prefix",
    "KEY_EXISTS": "a key of that name exists already",
    "NO_SUCH_KEY": "no active key of that name",
}
"""Why ``toolsafe keys`` refused (``KeyRefused.code``)."""


class KeyRefused(ToolsafeError, ValueError):
    """A key cannot be created or revoked as asked; the message says why."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


@dataclass(frozen=True)
class ApiKey:
    """A key as the gateway sees it; never the secret."""

    key_id: str
    name: str
    scope: Scope
    namespace: str | None
    created_at: datetime
    revoked_at: datetime | None

    @property
    def active(self) -> bool:
        return self.revoked_at is None


@dataclass(frozen=True)
class CreatedKey:
    key: ApiKey
    token: str
    """The Bearer token: shown once, then only its hash exists."""


def hash_secret(secret: str, salt: bytes) -> str:
    digest = hashlib.scrypt(
        secret.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, maxmem=64 * 1024 * 1024
    )
    return digest.hex()


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
        match = _TOKEN.fullmatch(token)
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
