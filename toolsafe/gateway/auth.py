"""Who is calling: a Bearer key (agent or operator scope, a namespace), or nobody.

Verifying a key runs scrypt (~50 ms), so a verified token is remembered for
:data:`CACHE_SECONDS` (and answered without a database read or a thread); after that
only the key's row is re-read, so a revoked key stops working within that time. A token
never verified goes through ``throttle``: failed checks are limited per key id and
source address, and only a few verifications run at once. In development mode
(loopback only, ``--no-auth``) every caller is the operator ``dev``.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Final

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from toolsafe.adapters.envelope import MAX_OPERATION_REF, OPERATION_REF_PATTERN
from toolsafe.gateway.problems import ApiProblem
from toolsafe.gateway.throttle import FailureWindow, Throttled, Verifiers
from toolsafe.recovery.store import StepNotFound
from toolsafe.recovery.store.keys import TOKEN_PATTERN, ApiKey, KeysPort

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
    """The keys' checks: ``failures`` failed checks per key id and source address in any
    ``window`` seconds, at most ``verifiers`` verifications at once (``throttle``)."""

    def __init__(
        self,
        keys: KeysPort | None,
        *,
        failures: int = 10,
        window: float = 60.0,
        verifiers: int = 2,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.keys = keys  # None: development mode, no keys checked
        self.failures = FailureWindow(failures, window, clock=clock)
        self.verifiers = Verifiers(verifiers)
        self._lock = threading.Lock()
        # sha256 of the token -> (its key, when it was checked, the caller it names)
        self._verified: dict[str, tuple[ApiKey, float, Principal]] = {}
        # (sha256 of the token, source) -> its verification under way (event loop only)
        self._flights: dict[tuple[str, str], asyncio.Future[ApiKey | None]] = {}

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
        """The caller of a token, looked up without limits (blocking: in a thread)."""
        found = self.key(token)
        return None if found is None else _principal(found)

    def key(self, token: str) -> ApiKey | None:
        assert self.keys is not None
        digest = hashlib.sha256(token.encode()).hexdigest()
        now = time.monotonic()
        with self._lock:
            cached = self._verified.get(digest)
        key: ApiKey | None
        if cached is not None and now - cached[1] < CACHE_SECONDS:
            return cached[0]
        if cached is not None:
            key = cached[0] if self.keys.active(cached[0].key_id) else None
        else:
            key = self.keys.verify(token)
        with self._lock:
            if key is None:
                self._verified.pop(digest, None)
            else:  # checked now: trusted CACHE_SECONDS
                self._verified[digest] = (key, now, _principal(key))
        return key

    async def checked_key(self, token: str, source: str) -> ApiKey | None:
        """The active key of a token (None: unknown, wrong or revoked), on the event
        loop. A token verified before only has its row re-read; any other is verified
        under the limits: :class:`Throttled` when its key id has failed too often from
        ``source``, or too many verifications wait already. Requests with the same token
        from the same source share one verification (an agent's first burst is one
        check, not a burst of failures-in-waiting)."""
        assert self.keys is not None
        digest = hashlib.sha256(token.encode()).hexdigest()
        with self._lock:
            seen = digest in self._verified
        if seen:  # no scrypt: at most the key's row is read again
            return await run_in_threadpool(self.key, token)
        match = TOKEN_PATTERN.fullmatch(token)
        if match is None:  # not a token's form: no key id to look up, nothing to verify
            return None
        flight = (digest, source)
        task = self._flights.get(flight)
        if task is None:
            task = asyncio.ensure_future(self._verify(token, match.group(1), source))
            self._flights[flight] = task
            task.add_done_callback(lambda done: self._landed(flight, done))
        # Shielded: a caller that goes away does not cancel the others' verification.
        return await asyncio.shield(task)

    async def _verify(self, token: str, key_id: str, source: str) -> ApiKey | None:
        stamp = self.failures.begin(key_id, source)
        ok: bool | None = None
        try:
            found = await self.verifiers.run(lambda: self.key(token))
            ok = found is not None
        finally:
            self.failures.end(key_id, source, stamp, ok=ok)
        return found

    def _landed(self, flight: tuple[str, str], done: asyncio.Future[ApiKey | None]) -> None:
        self._flights.pop(flight, None)
        if not done.cancelled():
            done.exception()  # retrieved here too, for when every caller went away

    async def authenticate(self, scheme: str | None, token: str | None, source: str) -> Principal:
        """The caller of a request with ``Authorization: <scheme> <token>`` (both ``None``
        without the header) from ``source`` (its client address): ``UNAUTHENTICATED``
        unless it is a valid Bearer key, ``TOO_MANY_BAD_KEYS`` / ``TOO_MANY_KEY_CHECKS``
        (429, ``Retry-After``) when the limits refuse to check it.

        A key verified within :data:`CACHE_SECONDS` is answered on the event loop; only
        a check that reads the database (or runs scrypt) goes to a worker thread, so the
        common request pays no thread hand-off for its caller."""
        if self.keys is None:
            return DEV
        challenge = {"WWW-Authenticate": 'Bearer realm="toolsafe"'}
        if scheme is None or token is None or scheme.lower() != "bearer":
            raise ApiProblem("UNAUTHENTICATED", "a Bearer key is required", headers=challenge)
        known = self.cached(token)
        if known is not None:
            return known
        try:
            key = await self.checked_key(token, source)
        except Throttled as refused:
            headers = {"Retry-After": str(refused.retry_after)}
            raise ApiProblem(refused.code, refused.detail, headers=headers) from None
        if key is None:
            raise ApiProblem(
                "UNAUTHENTICATED", "the key is unknown or was revoked", headers=challenge
            )
        return _principal(key)


def _principal(key: ApiKey) -> Principal:
    return Principal(name=key.name, scope=key.scope, namespace=key.namespace)


def source_of(client: object) -> str:
    """The address a request came from (Starlette's ``request.client`` or the ASGI
    scope's ``client`` pair), as the server reports it: uvicorn takes
    ``X-Forwarded-For`` only from ``FORWARDED_ALLOW_IPS``. ``""`` when unknown."""
    host = getattr(client, "host", None)
    if host is None and isinstance(client, (tuple, list)) and client:
        host = client[0]
    return str(host) if host else ""


async def caller(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Principal:
    """The dependency every /v1 route has: 401 without a valid key, 429 when the
    limits on bad keys refuse to check it (``Authenticator.authenticate``)."""
    authenticator: Authenticator = request.app.state.authenticator
    scheme, token = (
        (None, None) if credentials is None else (credentials.scheme, credentials.credentials)
    )
    return await authenticator.authenticate(scheme, token, source_of(request.client))


async def known_caller(request: Request, authenticator: Authenticator) -> Principal | None:
    """The caller of a request the authenticator can name without a database read or a
    thread: development mode, or a Bearer key verified within :data:`CACHE_SECONDS`
    (read from the header as ``caller`` reads it). None: ``caller`` must decide."""
    if authenticator.keys is None:
        return DEV
    credentials = await bearer(request)
    if credentials is None or credentials.scheme.lower() != "bearer":
        return None
    return authenticator.cached(credentials.credentials)


async def operator(principal: Annotated[Principal, Depends(caller)]) -> Principal:
    """Only operator keys approve, reject, resolve and re-drive."""
    if not principal.operator:
        raise ApiProblem("FORBIDDEN", "this action needs an operator key")
    return principal


Caller = Annotated[Principal, Depends(caller)]
Operator = Annotated[Principal, Depends(operator)]
