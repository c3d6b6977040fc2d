"""The shapes of secrets that redaction replaces (``redaction.redact``).

Each pattern names its ``needs``: lower-case texts one of which a text holds wherever
the pattern matches in it (the match or the context its lookarounds read). On plain
ASCII text (the common case: log lines, codes, refs) ``redact`` runs only the patterns
one of whose needs occurs in the lower-cased text; a pattern none of whose needs occurs
cannot match there, so skipping it changes nothing. The tests check every pattern's
needs on texts generated from the pattern itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class SecretPattern:
    kind: str
    pattern: re.Pattern[str]
    needs: tuple[str, ...]
    """Lower-case texts one of which a text holds where the pattern matches in it."""


def _p(kind: str, regex: str, flags: int = 0, *, needs: tuple[str, ...]) -> SecretPattern:
    if not needs or any(need != need.lower() for need in needs):
        raise ValueError(f"{kind}: needs must be non-empty lower-case texts")
    return SecretPattern(kind, re.compile(regex, flags), needs)


# Curated, anchored patterns for credentials with a known shape. Order matters: the
# larger structures (key blocks, URLs with credentials) are replaced before their parts.
SECRET_PATTERNS: Final[tuple[SecretPattern, ...]] = (
    _p(
        "private_key",
        r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----(?:.*?-----END[A-Z0-9 ]*PRIVATE KEY"
        r"(?: BLOCK)?-----|.*)",
        re.DOTALL,
        needs=("-----begin",),
    ),
    # Only the userinfo goes: scheme, host and port stay readable ("cannot connect to
    # redis://[REDACTED:url_credentials]@cache.internal:6379/0"). A password a library
    # already masked (kombu's ``:**@``) is no secret and stays as it is.
    _p(
        "url_credentials",
        r"(?<=[A-Za-z0-9+.\-]://)(?![^\s/@:]*:\*+@)[^\s/@:]*:[^\s/@]+(?=@[^\s'\"<>])",
        needs=("://",),
    ),
    # The same without a scheme: Go's ``user:pass@tcp(10.0.0.5:3306)/orders``, libpq's
    # ``user:pass@host:5432/db``, Oracle's ``scott/tiger@host:1521/ORCL``. A host with a
    # port, a path or a protocol in parentheses tells it from an e-mail address.
    _p(
        "dsn_credentials",
        r"(?<![\w.%+\-/:@\[])[A-Za-z_][\w.\-]{0,63}[:/][^\s@/:'\"<>()\[\]]{1,128}"
        r"(?=@(?:(?:tcp|udp|unix)\(|\[?[A-Za-z0-9_.\-]+\]?(?::\d{1,5}\b|/\w)))",
        needs=("@",),
    ),
    _p("bearer_token", r"(?i)\bbearer[\s:=]+['\"]?[A-Za-z0-9\-._~+/]{8,}=*", needs=("bearer",)),
    # SPNEGO/NTLM blobs and Digest answers, as WWW-Authenticate and Authorization carry
    # them; a token named in prose ("the access token 9f8e7d6c5b4a3f2e1d0c expired").
    _p(
        "auth_scheme_token",
        r"(?i)\b(?:negotiate|ntlm|kerberos)\s+[A-Za-z0-9+/]{16,}={0,2}",
        needs=("negotiate", "ntlm", "kerberos"),
    ),
    _p(
        "digest_auth",
        r"(?i)\b(?:response|cnonce|nonce|opaque)\s*=\s*\"?[A-Fa-f0-9]{16,}",
        needs=("response", "nonce", "opaque"),
    ),
    _p(
        "token_in_text",
        r"(?i)\b(?:access|refresh|bearer|id|api|auth|session|oauth|csrf)[ _\-]?token\b"
        r"(?:\s+(?:is|was|value|of))?\s*[=:]?\s*['\"]?(?=[A-Za-z0-9\-._~+/]*\d)"
        r"[A-Za-z0-9\-._~+/]{12,}=*",
        needs=("token",),
    ),
    _p("basic_auth", r"(?i)\bbasic\s+[A-Za-z0-9+/]{12,}={0,2}", needs=("basic",)),
    _p("jwt", r"\beyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]*", needs=("eyj",)),
    _p(
        "aws_access_key",
        r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}\b",
        needs=("akia", "asia", "agpa", "aida", "aroa", "anpa", "anva", "aipa"),
    ),
    _p(
        "aws_secret_key",
        r"(?i)aws.{0,24}?(?:secret|key).{0,24}?[=:]\s*['\"]?[A-Za-z0-9/+=]{40}",
        needs=("aws",),
    ),
    _p(
        "github_token",
        r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})",
        needs=("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ),
    _p("slack_token", r"\bxox[abposrce]-[A-Za-z0-9\-]{10,}", needs=("xox",)),
    _p(
        "slack_webhook",
        r"https://hooks\.slack\.com/services/[A-Za-z0-9/_\-]+",
        needs=("hooks.slack.com",),
    ),
    _p(
        "stripe_key",
        r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{10,}|\bwhsec_[A-Za-z0-9]{16,}",
        needs=("_live_", "_test_", "whsec_"),
    ),
    _p("google_api_key", r"\bAIza[0-9A-Za-z_\-]{30,}", needs=("aiza",)),
    _p("api_key_sk", r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_\-]{20,}", needs=("sk-",)),
    _p(
        "password_assignment",
        r"(?i)(?:\b|_)(?:password|passwd|pwd|pass|secret|token|api[_\-]?key|apikey|"
        r"access[_\-]?token|client[_\-]?secret|auth|session|sig|signature)"
        r"['\"]?\s*[=:]\s*['\"]?[^\s&'\",;<>]{3,}",
        needs=("pass", "pwd", "secret", "token", "api", "auth", "session", "sig"),
    ),
    # camelCase names of Java, .NET and Tomcat settings as stack traces and configuration
    # dumps print them: ``keyStorePassword=changeit``, ``keystorePass="changeit"``.
    _p(
        "password_field",
        r"(?<=[a-z0-9])(?:Password|PASSWORD|Passwd|Passphrase|Pwd|Pass|Secret)"
        r"['\"]?\s*[=:]\s*['\"]?[^\s&'\",;<>]{3,}",
        needs=("pass", "pwd", "secret"),
    ),
    # XML elements (SOAP's ``<wsse:Password>``, ``<password>``, ``<ns:apiKey>``): the value.
    _p(
        "xml_password",
        r"(?i)<(?:[\w\-]+:)?[\w\-]*(?:password|passwd|passphrase|secret|apikey|api_key"
        r"|credential)s?\b[^>]{0,200}>[^<]{1,256}(?=</)",
        needs=("pass", "secret", "api", "credential"),
    ),
    # A password named in prose, quoted or plainly of letters and digits, in the languages
    # the instruction patterns cover: ``password 'hunter2'``, ``with password P4ssw0rd!``,
    # ``Passwort: geheim123``.
    _p(
        "password_in_text",
        r"(?i)\b(?:password|passwd|passphrase|passwort|kennwort|contrase\u00f1a|senha"
        r"|mot de passe)\s*(?:is|was|ist|est|es|of|=|:)?\s*"
        r"(?:['\"\u2018\u201c\u00ab][^'\"\u2019\u201d\u00bb\s]{3,64}['\"\u2019\u201d\u00bb]"
        r"|(?=\S*\d)(?=\S*[A-Za-z])[^\s<>'\",;]{4,64})",
        needs=("pass", "kennwort", "senha"),
    ),
    _p(
        "password_in_text",
        r"(?:\u043f\u0430\u0440\u043e\u043b\u044c|\u5bc6\u7801|\u53e3\u4ee4"
        r"|\u30d1\u30b9\u30ef\u30fc\u30c9"
        r"|\u0643\u0644\u0645\u0629 \u0627\u0644\u0645\u0631\u0648\u0631)"
        r"\s*[:=\uff1a]?\s*[^\s<>'\",;\u3001\u3002]{3,64}",
        needs=(
            "\u043f\u0430\u0440\u043e\u043b\u044c",
            "\u5bc6\u7801",
            "\u53e3\u4ee4",
            "\u30d1\u30b9\u30ef\u30fc\u30c9",
            "\u0643\u0644\u0645\u0629 \u0627\u0644\u0645\u0631\u0648\u0631",
        ),
    ),
    _p("ssn", r"\b\d{3}-\d{2}-\d{4}\b", needs=("-",)),
)
