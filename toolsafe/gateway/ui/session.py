"""The status page's sessions: an operator key, checked once at login, becomes a signed
cookie (HttpOnly, SameSite=Strict, Secure over HTTPS); every form carries a CSRF token
tied to the session.

The cookie holds the key's id, name and namespace, an expiry and a random session id,
signed with HMAC-SHA256 under ``TOOLSAFE_UI_SESSION_KEY`` (or a key made at start). It
holds no secret: each request checks the key is still active, so revoking the key ends
its sessions.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from typing import Final

from fastapi import Request, Response

from toolsafe.gateway.auth import DEV, Authenticator, Principal
from toolsafe.recovery.store.keys import ApiKey

COOKIE: Final = "toolsafe_ui"
COOKIE_PATH: Final = "/ui"
LIFETIME_SECONDS: Final = 8 * 3600
DEV_KEY_ID: Final = "dev"


@dataclass(frozen=True)
class Session:
    """A signed-in operator: who (for the events), and this session's id."""

    principal: Principal
    key_id: str
    session_id: str
    expires: int


class Sessions:
    def __init__(self, authenticator: Authenticator, secret: str | None) -> None:
        self.authenticator = authenticator
        self._key = secret.encode() if secret else secrets.token_bytes(32)

    @property
    def development(self) -> bool:
        """No keys are checked (``toolsafe serve --no-auth``, loopback only)."""
        return self.authenticator.keys is None

    # ------------------------------------------------------------------ signing

    def _sign(self, data: bytes) -> str:
        return _b64(hmac.new(self._key, data, hashlib.sha256).digest())

    def csrf_token(self, session: Session) -> str:
        """The token every form of this session carries (and nobody else can make)."""
        return self._sign(f"csrf:{session.session_id}".encode())

    def csrf_ok(self, session: Session, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(token, self.csrf_token(session))

    def seal(self, session: Session, text: str) -> str:
        """``text`` for a redirect's query, signed for this session: the page after a
        refused action shows why, and nobody can make a link that shows another text."""
        data = _b64(text.encode())
        return f"{data}.{self._sign(f'note:{session.session_id}:{data}'.encode())}"

    def unseal(self, session: Session, sealed: str) -> str | None:
        """The text ``seal`` signed for this session, else ``None``."""
        data, _, signature = sealed.partition(".")
        expected = self._sign(f"note:{session.session_id}:{data}".encode())
        if not signature or not hmac.compare_digest(signature, expected):
            return None
        try:
            return _unb64(data).decode()
        except (ValueError, UnicodeDecodeError):
            return None

    # ------------------------------------------------------------------ login

    def login(self, token: str) -> Session | str:
        """A session for an operator key, or why there is none (never which part failed
        beyond what the operator can fix)."""
        if self.development:
            return self._new(DEV, DEV_KEY_ID)
        keys = self.authenticator.keys
        assert keys is not None
        return self._signed_in(keys.verify(token.strip()) if token.strip() else None)

    async def sign_in(self, token: str, source: str) -> Session | str:
        """``login`` as the login form does it, from ``source`` (the client's address):
        under the gateway's limits on bad keys, which raise ``Throttled``."""
        if self.development or not token.strip():
            return self.login(token)
        return self._signed_in(await self.authenticator.checked_key(token.strip(), source))

    def _signed_in(self, key: ApiKey | None) -> Session | str:
        if key is None:
            return "the key is unknown or was revoked"
        if key.scope != "operator":
            return "the status page needs an operator key (this is an agent key)"
        principal = Principal(name=key.name, scope=key.scope, namespace=key.namespace)
        return self._new(principal, key.key_id)

    def _new(self, principal: Principal, key_id: str) -> Session:
        return Session(
            principal=principal,
            key_id=key_id,
            session_id=secrets.token_urlsafe(16),
            expires=int(time.time()) + LIFETIME_SECONDS,
        )

    def cookie_value(self, session: Session) -> str:
        payload = {
            "k": session.key_id,
            "n": session.principal.name,
            "s": session.principal.scope,
            "ns": session.principal.namespace,
            "sid": session.session_id,
            "exp": session.expires,
        }
        body = _b64(json.dumps(payload, separators=(",", ":")).encode())
        return f"{body}.{self._sign(body.encode())}"

    def set_cookie(self, response: Response, request: Request, session: Session) -> None:
        response.set_cookie(
            COOKIE,
            self.cookie_value(session),
            max_age=LIFETIME_SECONDS,
            path=COOKIE_PATH,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )

    def clear_cookie(self, response: Response, request: Request) -> None:
        response.delete_cookie(
            COOKIE,
            path=COOKIE_PATH,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )

    # ------------------------------------------------------------------ each request

    def of(self, request: Request) -> Session | None:
        """The request's valid session, or None (no cookie, forged, expired, revoked)."""
        raw = request.cookies.get(COOKIE)
        if not raw or raw.count(".") != 1:
            return None
        body, signature = raw.split(".")
        if not hmac.compare_digest(signature, self._sign(body.encode())):
            return None
        try:
            payload = json.loads(_unb64(body))
            session = Session(
                principal=Principal(
                    name=str(payload["n"]), scope=str(payload["s"]), namespace=payload["ns"]
                ),
                key_id=str(payload["k"]),
                session_id=str(payload["sid"]),
                expires=int(payload["exp"]),
            )
        except (ValueError, KeyError, TypeError, binascii.Error):
            return None
        if session.expires < time.time():
            return None
        if self.development:
            return session if session.key_id == DEV_KEY_ID else None
        keys = self.authenticator.keys
        assert keys is not None
        if session.key_id == DEV_KEY_ID or not keys.active(session.key_id):
            return None
        return session


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
