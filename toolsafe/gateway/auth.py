"""Who is calling: a Bearer key (agent or operator scope, a namespace), or nobody.

Verifying a key runs scrypt (~50 ms), so a verified token is remembered for
:data:`CACHE_SECONDS` (and answered without a database read or a thread); after that
only the key's row is re-read, so a revoked key stops working within that time. In
development mode (loopback only, ``--no-auth``) every caller is the operator ``dev``.
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass
from typing import Annotated, Final

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from toolsafe.adapters.envelope import MAX_OPERATION_REF, OPERATION_REF_PATTERN
from toolsafe.gateway.problems import ApiProblem
from toolsafe.recovery.store import StepNotFound
from toolsafe.recovery.store.keys import ApiKey, KeysPort

CACHE_SECONDS: Final = 5.0
NAMESPACE_SEPARATOR: Final = "/"

bearer = HTTPBearer(auto_error=False, description="a key made by `toolsafe keys create`")


@dataclass(frozen=True)
class Principal:
    """The caller: its name (recorded in events), scope and namespace."""

    name: str
    scope: str
    namespace: str | None

    @property
    def actor(self) -> str:
        return f"key:{self.name}"

    @property
    def operator(self) -> bool:
        return self.scope == "operator"

    def scoped(self, operation_ref: str) -> str:
        """The operation_ref inside this caller's namespace: ``<namespace>/<ref>``
        unless it is there already. Another namespace's steps cannot be named at all."""
        if self.namespace is None:
            return operation_ref
        prefix = self.namespace + NAMESPACE_SEPARATOR
        return operation_ref if operation_ref.startswith(prefix) else prefix + operation_ref

    def existing(self, operation_ref: str) -> str:
        """``scoped`` for a step that must exist: a ref no step can have is not found."""
        ref = self.scoped(operation_ref)
        if len(ref) > MAX_OPERATION_REF or not OPERATION_REF_PATTERN.fullmatch(ref):
            raise StepNotFound(ref)
        return ref

    def by(self, given: str | None) -> str:
        """Who acted, for the step's events: the key, and whom it acted for."""
        return self.actor if not given else f"{given} ({self.actor})"


DEV: Final = Principal(name="dev", scope="operator", namespace=None)


class Authenticator:
    def __init__(self, keys: KeysPort | None) -> None:
        self.keys = keys  # None: development mode, no keys checked
        self._lock = threading.Lock()
        # sha256 of the token -> (its key, when it was checked, the caller it names)
        self._verified: dict[str, tuple[ApiKey, float, Principal]] = {}

    def cached(self, token: str) -> Principal | None:
        """The caller of a token verified less than :data:`CACHE_SECONDS` ago, without
        touching the database (None: ``principal`` must look)."""
        digest = hashlib.sha256(token.encode()).hexdigest()
        with self._lock:
            cached = self._verified.get(digest)
        if cached is not None and time.monotonic() - cached[1] < CACHE_SECONDS:
            return cached[2]
        return None

    def principal(self, token: str) -> Principal | None:
        assert self.keys is not None
        digest = hashlib.sha256(token.encode()).hexdigest()
        now = time.monotonic()
        with self._lock:
            cached = self._verified.get(digest)
        key: ApiKey | None
        if cached is not None and now - cached[1] < CACHE_SECONDS:
            return cached[2]
        if cached is not None:
            key = cached[0] if self.keys.active(cached[0].key_id) else None
        else:
            key = self.keys.verify(token)
        found = None if key is None else _principal(key)
        with self._lock:
            if key is None or found is None:
                self._verified.pop(digest, None)
            else:
                self._verified[digest] = (key, now, found)  # checked now: trusted CACHE_SECONDS
        return found


def _principal(key: ApiKey) -> Principal:
    return Principal(name=key.name, scope=key.scope, namespace=key.namespace)


async def caller(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Principal:
    """The dependency every /v1 route has: 401 without a valid key.

    A key verified within :data:`CACHE_SECONDS` is answered on the event loop; only a
    check that reads the database (or runs scrypt) goes to a worker thread, so the
    common request pays no thread hand-off for its caller."""
    authenticator: Authenticator = request.app.state.authenticator
    if credentials is None:
        return authenticate(authenticator, None, None)
    scheme, token = credentials.scheme, credentials.credentials
    if authenticator.keys is not None and scheme.lower() == "bearer":
        known = authenticator.cached(token)
        if known is not None:
            return known
    return await run_in_threadpool(authenticate, authenticator, scheme, token)


def authenticate(authenticator: Authenticator, scheme: str | None, token: str | None) -> Principal:
    """The caller of a request with ``Authorization: <scheme> <token>`` (both ``None``
    without the header); ``UNAUTHENTICATED`` unless it is a valid Bearer key."""
    if authenticator.keys is None:
        return DEV
    challenge = {"WWW-Authenticate": 'Bearer realm="toolsafe"'}
    if scheme is None or token is None or scheme.lower() != "bearer":
        raise ApiProblem("UNAUTHENTICATED", "a Bearer key is required", headers=challenge)
    found = authenticator.principal(token)
    if found is None:
        raise ApiProblem("UNAUTHENTICATED", "the key is unknown or was revoked", headers=challenge)
    return found


async def operator(principal: Annotated[Principal, Depends(caller)]) -> Principal:
    """Only operator keys approve, reject, resolve and re-drive."""
    if not principal.operator:
        raise ApiProblem("FORBIDDEN", "this action needs an operator key")
    return principal


Caller = Annotated[Principal, Depends(caller)]
Operator = Annotated[Principal, Depends(operator)]
