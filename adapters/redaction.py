"""Treating upstream text as hostile: Unicode clean-up, secret scanning, instruction
detection, allow-listed safe_details and a logging filter for everything that leaves."""

from __future__ import annotations

import functools
import logging
import math
import re
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Final

from toolsafe.adapters.envelope import DETAIL_KEY_PATTERN, MAX_DETAIL_STRING, MAX_DETAILS, SafeValue

# Their home is ``secret_patterns``; imported from here as before.
from toolsafe.adapters.secret_patterns import SECRET_PATTERNS as SECRET_PATTERNS
from toolsafe.adapters.secret_patterns import SecretPattern as SecretPattern

MAX_SCAN: Final = 65_536
"""Longer text is cut before scanning: nothing that long is ever passed on anyway."""

MAX_LOG_LINE: Final = 2_000

# Cc (controls), Cf (format: zero-width, bidi overrides, tags), Co/Cs/Cn (private,
# surrogates, unassigned): none belongs in a message, all can hide or reorder text.
_DROP_CATEGORIES: Final = frozenset({"Cc", "Cf", "Co", "Cs", "Cn"})


# ANSI escape sequences whole (CSI, OSC, DCS/SOS/PM/APC, charset designations and other
# nF/Fp/Fe ones, 8-bit CSI).
ANSI_SEQUENCE: Final = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?|\x1b[ -/]*[0-~]|\x9b[0-?]*[ -/]*[@-~]"
)


def clean_text(text: str, limit: int = MAX_SCAN) -> str:
    """NFKC-normalised (folds full-width and other compatibility look-alikes), invisible
    and control characters removed, whitespace collapsed, at most ``limit`` characters."""
    text = text[: limit * 2]
    if text.isascii() and text.isprintable():
        # The common case (log lines, codes, refs), at a fraction of the cost: printable
        # ASCII is NFKC-stable and holds no character of the categories dropped below.
        return " ".join(text.split())[:limit]
    text = unicodedata.normalize("NFKC", text)
    kept = []
    for char in text:
        if char in "\t\n\r":
            kept.append(" ")
        elif unicodedata.category(char) not in _DROP_CATEGORIES:
            kept.append(char)
    return " ".join("".join(kept).split())[:limit]


def _ascii_only(pattern: re.Pattern[str]) -> re.Pattern[str]:
    """``pattern`` with ASCII-only classes and case folding: the same answers on
    :func:`_plain_ascii` text, in about two thirds of the time. No pattern here holds a
    character that Unicode case folding matches to an ASCII one (tests check it), and
    in such text ``\\s``, ``\\b``, ``\\d`` and ``\\w`` mean the same either way."""
    return re.compile(pattern.pattern, (pattern.flags & ~re.UNICODE) | re.ASCII)


# The four ASCII characters Unicode's ``\s`` matches and ASCII's does not.
_UNICODE_ONLY_SPACE: Final = re.compile(r"[\x1c-\x1f]")


def _plain_ascii(text: str) -> bool:
    """Text on which an ``_ascii_only`` pattern answers as the Unicode one does."""
    return text.isascii() and _UNICODE_ONLY_SPACE.search(text) is None


_ASCII_SECRET_PATTERNS: Final = tuple(_ascii_only(secret.pattern) for secret in SECRET_PATTERNS)
_PLAIN_SECRET_PATTERNS: Final = tuple(
    (secret, pattern, frozenset(secret.needs))
    for secret, pattern in zip(SECRET_PATTERNS, _ASCII_SECRET_PATTERNS, strict=True)
)
# Every need plain ASCII text can hold, each looked for once per text.
_SECRET_NEEDS: Final = tuple(
    dict.fromkeys(need for secret in SECRET_PATTERNS for need in secret.needs if need.isascii())
)


def _scoped(secret: SecretPattern) -> str:
    """The pattern with its flags inside it, fit to be one branch of a larger regex."""
    source = secret.pattern.pattern
    if source.startswith("(?i)"):
        source = f"(?i:{source[4:]})"
    if secret.pattern.flags & re.DOTALL:
        source = f"(?s:{source})"
    return f"(?:{source})"


# Whether any pattern matches at all in text that is not plain ASCII, in one scan: most
# text holds no secret, and one search costs less than a substitution per pattern. When
# it finds nothing, no pattern would have changed the text. (Plain ASCII text has a
# cheaper test: the patterns' needs.)
_ANY_SECRET: Final = re.compile("|".join(_scoped(secret) for secret in SECRET_PATTERNS))

# A run of digits (single spaces or dashes between them) that stands on its own: not
# after a letter, digit, "_", "." or "-" (an id, a decimal's fraction, a uuid's group),
# not before a letter, digit or "_", a decimal point and a digit, or a dash and more of
# an id. Celery's "succeeded in 0.0123456789012345s" and its task ids are no cards.
_CARD_CANDIDATE: Final = re.compile(r"(?<![\w.\-])\d(?:[ \-]?\d){12,}(?![\w]|[.,]\d|-\w)")
_UUID_DIGITS: Final = re.compile(r"\d{8}-\d{4}-\d{4}-\d{4}-\d{12}")
# Not right after "/": "logo@2x.png" in a URL's path is a file name.
_EMAIL: Final = re.compile(
    r"(?<![/A-Za-z0-9._%+\-])[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,}"
)


def luhn_valid(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char)
        if index % 2 == 1:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


def card_valid(digits: str) -> bool:
    """13 to 19 digits, an issuer's first digit (2 to 6: Mastercard, Amex, Diners, JCB,
    Visa, Discover, UnionPay, Maestro) and the Luhn check."""
    return 13 <= len(digits) <= 19 and digits[0] in "23456" and luhn_valid(digits)


def _card_in_run(run: str) -> tuple[int, int] | None:
    """Where in a digit run a card number stands, if one does: the whole run, or the
    run less a short number before or after it (a quantity, an expiry, a CVC). A run of
    more digits than that is a longer number (a reference, a uuid): no card."""
    if _UUID_DIGITS.fullmatch(run):
        return None
    groups = [(match.start(), match.end()) for match in re.finditer(r"\d+", run)]
    digits = [run[start:end] for start, end in groups]
    total = sum(len(group) for group in digits)
    for first in range(len(groups)):
        for last in range(len(groups) - 1, first - 1, -1):
            kept = "".join(digits[first : last + 1])
            if total - len(kept) > 4:
                break
            if card_valid(kept):
                return groups[first][0], groups[last][1]
    return None


def _card_spans(text: str) -> list[tuple[int, int]]:
    spans = []
    for match in _CARD_CANDIDATE.finditer(text):
        found = _card_in_run(match.group())
        if found is not None:
            spans.append((match.start() + found[0], match.start() + found[1]))
    return spans


# Two letters, two check digits, 11 to 30 letters and digits, in groups of four or not.
_IBAN_CANDIDATE: Final = re.compile(
    r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}(?![A-Za-z0-9])"
)


def iban_valid(candidate: str) -> bool:
    """ISO 13616's mod-97 check: the four first characters moved to the end, letters as
    10..35, the number modulo 97 is 1."""
    compact = candidate.replace(" ", "")
    if not 15 <= len(compact) <= 34:
        return False
    moved = compact[4:] + compact[:4]
    digits = "".join(str(int(char, 36)) for char in moved)
    return int(digits) % 97 == 1


def _iban_spans(text: str) -> list[tuple[int, int]]:
    spans = []
    for match in _IBAN_CANDIDATE.finditer(text):
        found = match.group().rstrip()
        # Words in capitals may follow ("… PAID"): drop trailing words until it checks.
        while found:
            if iban_valid(found):
                spans.append((match.start(), match.start() + len(found)))
                break
            if " " not in found:
                break
            found = found.rsplit(" ", 1)[0]
    return spans


def _replace_secrets_in_plain_text(text: str) -> str:
    """Every secret pattern applied in order to plain ASCII text, but those none of
    whose ``needs`` the text holds: they cannot match (``secret_patterns``). Most text
    holds no need at all, and a few substring tests cost less than one regex scan."""
    present = _needs_in(text)
    for secret, pattern, needs in _PLAIN_SECRET_PATTERNS:
        if present.isdisjoint(needs):
            continue
        replaced = pattern.sub(f"[REDACTED:{secret.kind}]", text)
        if replaced != text:
            # A replacement is ASCII too: the text stays plain for the next pattern.
            text = replaced
            present = _needs_in(text)
    return text


def _needs_in(text: str) -> set[str]:
    lowered = text.lower()
    return {need for need in _SECRET_NEEDS if need in lowered}


def redact(
    text: str, *, allowed_emails: Iterable[str] = (), allowed_domains: Iterable[str] = ()
) -> str:
    """``text`` with every secret replaced by ``[REDACTED:<kind>]``; e-mail addresses in
    ``allowed_emails``, or on a domain of ``allowed_domains`` (or a subdomain), stay."""
    text = text[:MAX_SCAN]
    if _plain_ascii(text):
        text = _replace_secrets_in_plain_text(text)
    elif _ANY_SECRET.search(text) is not None:
        for secret in SECRET_PATTERNS:
            text = secret.pattern.sub(f"[REDACTED:{secret.kind}]", text)
    for start, end in reversed(_card_spans(text)):
        text = f"{text[:start]}[REDACTED:card_number]{text[end:]}"
    for start, end in reversed(_iban_spans(text)):
        text = f"{text[:start]}[REDACTED:iban]{text[end:]}"
    allowed = {address.lower() for address in allowed_emails}
    domains = tuple(domain.lower() for domain in allowed_domains)

    def _email(match: re.Match[str]) -> str:
        address = match.group().lower()
        host = address.rpartition("@")[2]
        if address in allowed or any(host == d or host.endswith("." + d) for d in domains):
            return match.group()
        return "[REDACTED:email]"

    return _EMAIL.sub(_email, text)


def find_secrets(
    text: str, *, allowed_emails: Iterable[str] = (), allowed_domains: Iterable[str] = ()
) -> list[str]:
    """The kinds of secret found in ``text`` (empty when it is clean)."""
    redacted = redact(text, allowed_emails=allowed_emails, allowed_domains=allowed_domains)
    return sorted(set(re.findall(r"\[REDACTED:([a-z_]+)\]", redacted)))


# Phrases that address a model rather than report an error, in the languages agents'
# downstreams answer in. A hit does not need to be certain: the text is dropped anyway,
# the hit only decides that the code becomes UPSTREAM_ERROR.
# Each with its needs: lower-case texts one of which a text holds wherever the phrase is
# found in its case-folded form (as ``secret_patterns``' needs; the tests check them).
_INSTRUCTIONS: Final[tuple[tuple[str, tuple[str, ...]], ...]] = (
    (
        r"\b(?:ignore|disregard|forget|override|bypass)\b.{0,40}\b(?:instruction|prompt|rule"
        r"|guideline|polic|previous|prior|above|earlier|system)",
        ("ignore", "disregard", "forget", "override", "bypass"),
    ),
    (r"\byou are (?:now|no longer)\b", ("you are n",)),
    (r"\b(?:new|updated|real|actual) instructions?\b", ("instruction",)),
    (r"\bsystem prompt\b", ("system prompt",)),
    (r"\b(?:act|behave) as\b", ("act as", "behave as")),
    (r"\bpretend (?:to be|you are)\b", ("pretend ",)),
    (r"\bas an ai\b", ("as an ai",)),
    (r"\bdo not (?:tell|inform|show|mention)\b.{0,20}\b(?:user|human|operator)", ("do not ",)),
    (
        r"\b(?:call|invoke|use|run) (?:the )?[a-z_]+ (?:tool|function)\b",
        ("call ", "invoke ", "use ", "run "),
    ),
    (r"\b(?:jailbreak|developer mode|dan mode)\b", ("jailbreak", "developer mode", "dan mode")),
    (r"(?:^|\s)(?:system|assistant|user|human)\s*:", ("system", "assistant", "user", "human")),
    (
        r"<\|?(?:im_start|im_end|system|endoftext)\|?>|\[/?INST\]|<</?SYS>>",
        ("im_start", "im_end", "system", "endoftext", "inst]", "sys>>"),
    ),
    (r"#{2,}\s*(?:instruction|system)", ("instruction", "system")),
    # Chinese
    (
        r"(?:忽略|无视|忽视|不要理会|忘记|跳过).{0,12}(?:指令|指示|说明|提示|规则|要求|设定)",
        ("忽略", "无视", "忽视", "不要理会", "忘记", "跳过"),
    ),
    (
        r"你现在是|从现在开始你|系统提示|不要告诉用户|新的指令|扮演|请立即(?:执行|调用|转账)",
        ("你现在是", "从现在开始你", "系统提示", "不要告诉用户", "新的指令", "扮演", "请立即"),
    ),
    # Spanish
    (r"\bignor[ae]r?\b.{0,30}\binstrucci[oó]n", ("ignor",)),
    (
        r"\b(?:olvida|omite)\b.{0,30}\binstrucci[oó]n|\bahora eres\b",
        ("olvida", "omite", "ahora eres"),
    ),
    # German
    (
        r"\b(?:ignoriere|vergiss|missachte)\b.{0,40}\b(?:anweisung|instruktion|regel)",
        ("ignoriere", "vergiss", "missachte"),
    ),
    (r"\bdu bist (?:jetzt|nun)\b", ("du bist ",)),
    # French
    (r"\bignor(?:e|ez|er)\b.{0,30}\b(?:instruction|consigne)", ("ignor",)),
    (r"\b(?:tu es|vous êtes) maintenant\b", ("maintenant",)),
    # Russian, Japanese
    (
        r"(?:игнорируй|забудь|проигнорируй).{0,30}(?:инструкц|указани|правил)",
        ("игнорируй", "забудь", "проигнорируй"),
    ),
    (
        r"(?:指示|命令|ルール).{0,10}(?:無視|忘れ)|(?:無視|忘れ).{0,10}(?:指示|命令)",
        ("無視", "忘れ"),
    ),
)
_INSTRUCTION_PATTERNS: Final = tuple(re.compile(regex, re.IGNORECASE) for regex, _ in _INSTRUCTIONS)
# The needs plain ASCII text can hold (the phrases of other scripts never occur in it).
_INSTRUCTION_NEEDS: Final = tuple(
    dict.fromkeys(need for _, needs in _INSTRUCTIONS for need in needs if need.isascii())
)


# All of them in one regex: one scan instead of one per pattern, the same answer.
_ANY_INSTRUCTION: Final = re.compile(
    "|".join(f"(?:{pattern.pattern})" for pattern in _INSTRUCTION_PATTERNS), re.IGNORECASE
)


_ANY_INSTRUCTION_ASCII: Final = _ascii_only(_ANY_INSTRUCTION)


def looks_like_instructions(text: str) -> bool:
    """Whether ``text`` reads like an attempt to instruct a model."""
    flat = clean_text(text).casefold()
    if not _plain_ascii(flat):
        return _ANY_INSTRUCTION.search(flat) is not None
    # Plain text holding none of the phrases' needs holds none of the phrases.
    if not any(need in flat for need in _INSTRUCTION_NEEDS):
        return False
    return _ANY_INSTRUCTION_ASCII.search(flat) is not None


def safe_text(text: str, limit: int = MAX_DETAIL_STRING) -> str:
    """Upstream or user text made fit to show: cleaned, secrets redacted, instructions
    removed, capped. Still never a source of agent_message or user_message."""
    if "\x1b" in text or "\x9b" in text:
        # The sequence whole: dropping ESC alone would leave "[31m" behind.
        text = ANSI_SEQUENCE.sub("", text)
    cleaned = clean_text(text)
    if looks_like_instructions(cleaned):
        return "[REMOVED:instructions]"
    return redact(cleaned)[:limit]


_SAFE_DETAIL_CHARS: Final = re.compile(r"^[A-Za-z0-9 _.,:;/()+\-]*$")


def safe_detail_value(value: object) -> SafeValue | None:
    """A detail value fit for safe_details, or ``None`` when it must be dropped.

    Only scalars; strings are cleaned, capped, limited to a plain character set and must
    hold no secret and no instructions (a value that was changed by redaction is
    dropped rather than shown half-redacted).
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if abs(value) < 10**15 else None
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if not isinstance(value, str):
        return None
    cleaned = clean_text(value, MAX_DETAIL_STRING)
    if not _SAFE_DETAIL_CHARS.fullmatch(cleaned):
        return None
    if looks_like_instructions(cleaned) or redact(cleaned) != cleaned:
        return None
    return cleaned


def safe_details_for(
    details: Mapping[str, object], allowed_keys: Iterable[str]
) -> dict[str, SafeValue]:
    """Only the allowed keys, only values that pass :func:`safe_detail_value`."""
    allowed = frozenset(allowed_keys)
    safe: dict[str, SafeValue] = {}
    for key, value in details.items():
        if key not in allowed or not DETAIL_KEY_PATTERN.fullmatch(key):
            continue
        checked = safe_detail_value(value)
        if checked is not None and len(safe) < MAX_DETAILS:
            safe[key] = checked
    return safe


_RECORD_TEXT_ATTRS: Final = frozenset(
    {
        "name", "msg", "args", "levelname", "levelno", "pathname", "filename", "module",
        "exc_info", "exc_text", "stack_info", "lineno", "funcName", "created", "msecs",
        "relativeCreated", "thread", "threadName", "processName", "process", "taskName",
        "message", "asctime",
    }
)  # fmt: skip


def _scrub(text: str, limit: int) -> str:
    cleaned = clean_text(text, limit)
    if looks_like_instructions(cleaned):
        return "[REMOVED:instructions]"
    return redact(cleaned)


# Log records repeat their short fields (event names, states, tools, refs): each is
# scrubbed once, not once per line. ``_scrub`` is a pure function of its arguments.
_CACHED_TEXT: Final = 256
_scrubbed: Final = functools.lru_cache(maxsize=4096)(_scrub)


class RedactingFilter(logging.Filter):
    """Redacts every log record that passes: message, arguments, extras and tracebacks.

    Attach it to the handlers (or loggers) that carry toolsafe's logs; records are
    rewritten in place, so every handler after it sees only the redacted text.
    """

    def __init__(self, name: str = "", limit: int = MAX_LOG_LINE) -> None:
        super().__init__(name)
        self.limit = limit

    def _scrub(self, text: str) -> str:
        if len(text) <= _CACHED_TEXT:
            return _scrubbed(text, self.limit)
        return _scrub(text, self.limit)

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            message = str(record.msg)
        record.msg = self._scrub(message)
        record.args = None
        if record.exc_info:
            formatted = logging.Formatter().formatException(record.exc_info)
            record.exc_text = self._scrub(formatted)
            record.exc_info = None
        elif record.exc_text:
            record.exc_text = self._scrub(record.exc_text)
        if record.stack_info:
            record.stack_info = self._scrub(record.stack_info)
        for key, value in list(vars(record).items()):
            if key not in _RECORD_TEXT_ATTRS and isinstance(value, str):
                setattr(record, key, self._scrub(value))
        return True


def install_log_guard(logger: logging.Logger | None = None) -> RedactingFilter:
    """Attach one :class:`RedactingFilter` to every handler of ``logger`` (the root logger
    by default) that does not have one yet; returns the filter. Workers call it when
    Celery has set up their logging; a gateway or any process of your own calls it after
    configuring its handlers (handlers added later need it attached again)."""
    target = logger if logger is not None else logging.getLogger()
    guard = next(
        (f for h in target.handlers for f in h.filters if isinstance(f, RedactingFilter)),
        RedactingFilter(),
    )
    for handler in target.handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(guard)
    return guard
