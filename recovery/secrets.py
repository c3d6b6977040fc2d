"""Secret input fields at rest: sealed with Fernet (``cryptography``) under the keys of
``TOOLSAFE_SECRET_KEYS`` before the step is stored, opened only in the worker that calls
the adapter. The first key seals; every key opens (``MultiFernet``), so keys rotate by
putting a new one first (``docs/operations.md``)."""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from toolsafe.adapters.errors import ToolsafeError
from toolsafe.recovery.canonical import input_hash

SEALED: Final = "$sealed"
"""A sealed value is stored as ``{"$sealed": "<Fernet token>"}``."""


class SecretKeyError(ToolsafeError, ValueError):
    """A sealed input cannot be opened (no key, or none of the keys fits)."""

    def __init__(self, field: str) -> None:
        super().__init__(field)
        self.field = field

    def __str__(self) -> str:
        return (
            f"the secret input field {self.field!r} cannot be decrypted with any key in "
            "TOOLSAFE_SECRET_KEYS"
        )


def is_sealed(value: object) -> bool:
    return isinstance(value, Mapping) and set(value) == {SEALED}


def check_key(key: str) -> None:
    """Raises ``ValueError`` unless ``key`` is a Fernet key (32 url-safe base64 bytes)."""
    Fernet(key.encode("ascii"))


def new_key() -> str:
    return Fernet.generate_key().decode("ascii")


class SecretBox:
    """Seals and opens the secret fields of an input; hashes them without revealing them."""

    def __init__(self, keys: Sequence[str]) -> None:
        if not keys:
            raise ValueError("a SecretBox needs at least one key")
        self._fernet = MultiFernet([Fernet(key.encode("ascii")) for key in keys])
        # One hashing key per Fernet key: a repeat submitted after a rotation hashes the
        # same under the key it was first stored with.
        self._hash_keys = [
            hashlib.sha256(b"toolsafe-input-hash\0" + base64.urlsafe_b64decode(key)).digest()
            for key in keys
        ]

    def seal(self, input: Mapping[str, Any], fields: Iterable[str]) -> dict[str, Any]:
        sealed = dict(input)
        for name in fields:
            value = sealed.get(name)
            if value is None or is_sealed(value):
                continue
            token = self._fernet.encrypt(str(value).encode("utf-8")).decode("ascii")
            sealed[name] = {SEALED: token}
        return sealed

    def open(self, input: Mapping[str, Any]) -> dict[str, Any]:
        opened = dict(input)
        for name, value in input.items():
            if is_sealed(value):
                try:
                    opened[name] = self._fernet.decrypt(str(value[SEALED]).encode()).decode()
                except InvalidToken:
                    raise SecretKeyError(name) from None
        return opened

    def rotate(self, input: Mapping[str, Any]) -> dict[str, Any]:
        """The same input with every sealed value re-encrypted under the first key."""
        rotated = dict(input)
        for name, value in input.items():
            if is_sealed(value):
                try:
                    token = self._fernet.rotate(str(value[SEALED]).encode()).decode("ascii")
                except InvalidToken:
                    raise SecretKeyError(name) from None
                rotated[name] = {SEALED: token}
        return rotated

    def hashes(self, input: Mapping[str, Any], fields: Iterable[str]) -> list[str]:
        """The input's hash under each key, the first key's first: secret values enter
        as an HMAC, so the stored hash says nothing about a guessable secret."""
        names = [name for name in fields if input.get(name) is not None]
        found = []
        for key in self._hash_keys:
            masked = dict(input)
            for name in names:
                mac = hmac.new(key, str(input[name]).encode("utf-8"), hashlib.sha256)
                masked[name] = f"hmac-sha256:{mac.hexdigest()}"
            found.append(input_hash(masked))
        return found


def open_without_keys(input: Mapping[str, Any]) -> dict[str, Any]:
    """For a process without keys: fine unless the input holds a sealed value."""
    for name, value in input.items():
        if is_sealed(value):
            raise SecretKeyError(name)
    return dict(input)
