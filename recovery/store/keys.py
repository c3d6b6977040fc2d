"""The gateway's keys, as any backend keeps them: a key's record, the refusals, the
token's form and the salted scrypt hash its secret is kept as, and :class:`KeysPort`,
what the gateway and ``toolsafe keys`` use (``sql/keys.py`` keeps them in a table;
docs/gateway.md)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal, Protocol

from toolsafe.adapters.errors import ToolsafeError

__all__ = [
    "KEY_REFUSALS",
    "SCOPES",
    "TOKEN_PATTERN",
    "ApiKey",
    "CreatedKey",
    "KeyRefused",
    "KeysPort",
    "Scope",
    "hash_secret",
]

Scope = Literal["agent", "operator"]
SCOPES: Final[tuple[Scope, ...]] = ("agent", "operator")
TOKEN_PREFIX: Final = "tsk_"  # noqa: S105 - a prefix, not a secret
# scrypt's interactive-login parameters (16 MiB, ~50 ms): a stolen table costs dearly.
SCRYPT_N: Final = 2**14
SCRYPT_R: Final = 8
SCRYPT_P: Final = 1
NAMESPACE_PATTERN: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,99}$")
NAME_PATTERN: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@\-]{0,199}$")
TOKEN_PATTERN: Final = re.compile(r"^tsk_([0-9a-f]{16})_([A-Za-z0-9_\-]{20,100})$")


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


class KeysPort(Protocol):
    """The gateway's keys as their users see them; each method one short transaction."""

    def create(self, name: str, scope: str, namespace: str | None, *, now: datetime) -> CreatedKey:
        """A new key; an agent key without a namespace gets its name as namespace;
        ``KeyRefused`` for a bad name, scope or namespace, or a name in use."""
        ...

    def list(self) -> list[ApiKey]:
        """Every key, oldest first."""
        ...

    def revoke(self, name: str, *, now: datetime) -> ApiKey:
        """Revoke the active key of that name; ``KeyRefused`` (``NO_SUCH_KEY``) if none."""
        ...

    def verify(self, token: str) -> ApiKey | None:
        """The active key the token belongs to, or None (unknown, wrong or revoked)."""
        ...

    def active(self, key_id: str) -> bool:
        """The key exists and is not revoked (the cheap re-check behind a cache)."""
        ...
