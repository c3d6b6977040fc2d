"""Free text of a success result, made fit to show: escapes and invisible characters out,
Markdown and HTML that would fetch or hide something neutralised, and the views a
detector reads (tags and entities gone, accents folded, look-alike letters mapped,
base64 and percent-encoding opened) so that a secret or an instruction cannot hide.

The error path never shows upstream text at all (``adapters/codes.py``); these rules are
for the strings a result keeps (``adapters/results.py``).
"""

from __future__ import annotations

import base64
import binascii
import html
import re
import unicodedata
from collections.abc import Iterable, Iterator
from typing import Final
from urllib.parse import unquote, urlsplit

from toolsafe.adapters.instructions import addresses_a_model
from toolsafe.adapters.redaction import ANSI_SEQUENCE, clean_text, find_secrets

# Characters that render as nothing yet are letters or marks, so the category rule of
# ``clean_text`` keeps them: variation selectors, the combining grapheme joiner, Hangul
# and Khmer fillers, the Mongolian selectors, the blank Braille pattern.
_INVISIBLE: Final = re.compile(
    "[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u2800\u3164\ufe00-\ufe0f\uffa0"
    "\U000e0100-\U000e01ef]"
)


_HIDDEN_CATEGORIES: Final = frozenset({"Cc", "Cf", "Co", "Cs", "Cn"})


def _fold(char: str) -> str:
    """A letter or digit drawn as another form of an ASCII one (full-width, mathematical
    bold, ...) as that ASCII one; any other character as it is. A reader sees the same
    thing; a scanner then reads what the reader sees. Punctuation of other scripts (the
    ideographic comma, "№") stays: NFKC would alter legitimate text."""
    if unicodedata.category(char)[0] not in "LN" or unicodedata.category(char) == "No":
        return char
    folded = unicodedata.normalize("NFKC", char)
    return folded if len(folded) == 1 and folded.isascii() and folded.isalnum() else char


def normalise(text: str, limit: int) -> str:
    """Text fit to show: ANSI sequences cut out whole, control, format (zero-width, bidi),
    private and unassigned characters and invisible letters removed, look-alike letters
    and digits folded to ASCII, NFC, whitespace collapsed, at most ``limit`` characters.
    Detectors read its NFKC form as well (:func:`views`)."""
    if text.isascii() and text.isprintable():
        return clean_text(text, limit)
    text = text[: limit * 2]
    if "\x1b" in text or "\x9b" in text:
        text = ANSI_SEQUENCE.sub("", text)
    text = _INVISIBLE.sub("", unicodedata.normalize("NFC", text))
    kept = []
    for char in text:
        if char in "\t\n\r":
            kept.append(" ")
        elif char.isascii():
            kept.append(char)
        elif unicodedata.category(char) not in _HIDDEN_CATEGORIES:
            kept.append(_fold(char))
    return " ".join(_INVISIBLE.sub("", "".join(kept)).split())[:limit]


def host_declared(url: str, hosts: frozenset[str]) -> bool:
    """Whether a link or image source may stay: relative, ``mailto:``/``tel:``, or on a
    declared host (or a subdomain of one). ``javascript:``, ``data:`` and the like never."""
    url = url.strip().strip("<>\"'")
    lowered = url.casefold()
    if lowered.startswith(("mailto:", "tel:", "#")):
        return True
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    if parts.scheme and parts.scheme.casefold() not in ("http", "https"):
        return False
    if "@" in parts.netloc:
        return False  # "https://billing.example.com@evil.example/" shows one host, opens another
    if not parts.netloc:
        return not parts.scheme and not url.startswith("//") and ":" not in url.split("/")[0]
    host = (parts.hostname or "").casefold().rstrip(".")
    return any(host == name or host.endswith("." + name) for name in hosts)


_COMMENT: Final = re.compile(r"<!--.*?(?:-->|$)|<!\[CDATA\[.*?(?:\]\]>|$)", re.DOTALL)
_ELEMENT: Final = re.compile(
    r"<(script|style|iframe|object|embed|svg|math|template|noscript|textarea|frameset|xmp)"
    r"\b[^>]*>.*?(?:</\1\s*>|$)",
    re.IGNORECASE | re.DOTALL,
)
_VOID: Final = re.compile(
    r"</?(?:script|style|iframe|object|embed|svg|math|template|noscript|textarea|frameset"
    r"|xmp|meta|link|base|frame|form|input|button|img|image|video|audio|source|track)\b[^>]*>",
    re.IGNORECASE,
)
_TAG: Final = re.compile(r"<([A-Za-z][A-Za-z0-9:\-]*)(\s[^<>]*?)?(/?)>")
_ATTRIBUTE: Final = re.compile(r"""\s+([^\s=/>"']+)(?:\s*=\s*("[^"]*"|'[^']*'|[^\s>"']+))?""")
_URL_ATTRIBUTES: Final = frozenset(
    {"href", "src", "action", "formaction", "background", "poster", "data", "xlink:href",
     "srcset", "lowsrc", "dynsrc", "ping", "cite", "longdesc", "manifest", "codebase"}
)  # fmt: skip
_DANGEROUS_ATTRIBUTES: Final = frozenset({"style", "srcdoc", "hidden"})
_MD_IMAGE: Final = re.compile(r"!\[([^\]]{0,500})\]\(\s*(<[^>]*>|[^)\s]*)(?:\s+[^)]*)?\)")
_MD_IMAGE_REF: Final = re.compile(r"!\[[^\]]{0,500}\]\[[^\]]{0,200}\]")
_MD_LINK: Final = re.compile(r"\[([^\]]{0,500})\]\(\s*(<[^>]*>|[^)\s]*)(?:\s+[^)]*)?\)")
_MD_DEFINITION: Final = re.compile(r"\[[^\]]{1,200}\]:\s*(<[^>]*>|\S+)(?:\s+\"[^\"]*\")?")
_AUTOLINK: Final = re.compile(
    r"<((?:[A-Za-z][A-Za-z0-9+.\-]*://|(?:javascript|vbscript|data|mailto):)[^\s<>]*)>",
    re.IGNORECASE,
)
IMAGE_MARK: Final = "[REMOVED:image]"


class Neutralised:
    """The text with markup neutralised, and the kinds of what was changed."""

    def __init__(self, text: str, hosts: frozenset[str]) -> None:
        self.hosts = hosts
        self.kinds: list[str] = []
        self.text = self._run(text)

    def _note(self, kind: str) -> None:
        if kind not in self.kinds:
            self.kinds.append(kind)

    def _run(self, text: str) -> str:
        if "<" in text:
            text = self._sub(_COMMENT, "html_comment", text, "")
            text = self._sub(_ELEMENT, "html_element", text, "")
            text = _TAG.sub(self._tag, text)
            text = self._sub(_VOID, "html_element", text, "")
            text = _AUTOLINK.sub(self._autolink, text)
        if "[" in text:
            text = _MD_IMAGE.sub(self._image, text)
            text = self._sub(_MD_IMAGE_REF, "image", text, IMAGE_MARK)
            text = _MD_LINK.sub(self._link, text)
            text = _MD_DEFINITION.sub(self._definition, text)
        return " ".join(text.split())

    def _sub(self, pattern: re.Pattern[str], kind: str, text: str, by: str) -> str:
        changed, count = pattern.subn(by, text)
        if count:
            self._note(kind)
        return changed

    def _tag(self, match: re.Match[str]) -> str:
        name, attributes, closing = match.group(1), match.group(2) or "", match.group(3)
        if not attributes.strip():
            return match.group()
        kept = []
        for attribute in _ATTRIBUTE.finditer(attributes):
            key = attribute.group(1).casefold()
            value = html.unescape((attribute.group(2) or "").strip("\"'"))
            compact = re.sub(r"\s", "", value)
            if (
                key.startswith("on")
                or key in _DANGEROUS_ATTRIBUTES
                or (key in _URL_ATTRIBUTES and not host_declared(compact, self.hosts))
                or re.match(r"(?i)(?:java|vb)script:|data:", compact)
            ):
                self._note("html_attribute")
                continue
            kept.append(attribute.group())
        return f"<{name}{''.join(kept)}{closing}>"

    def _autolink(self, match: re.Match[str]) -> str:
        if host_declared(match.group(1), self.hosts):
            return match.group()
        self._note("link")
        return ""

    def _image(self, match: re.Match[str]) -> str:
        if host_declared(match.group(2), self.hosts):
            return match.group()
        self._note("image")
        return IMAGE_MARK

    def _link(self, match: re.Match[str]) -> str:
        if host_declared(match.group(2), self.hosts):
            return match.group()
        self._note("link")
        return match.group(1)

    def _definition(self, match: re.Match[str]) -> str:
        if host_declared(match.group(1), self.hosts):
            return match.group()
        self._note("link")
        return ""


# ------------------------------------------------------------------ what a detector reads

# Letters of other scripts drawn like Latin ones (Unicode's confusables, the common part),
# and digits and signs written for letters. Used to read, never to show.
_LOOK_ALIKE: Final = str.maketrans(
    "аеорсухіјѕԁһӏԛԝвкмнтАВЕКМНОРСТХІЈЅԜԚ"  # Cyrillic
    "αβεικνορτυχωΑΒΕΖΗΙΚΜΝΟΡΤΥΧ"  # Greek
    "ɑɡɩɪʏᴀᴄᴅᴇᴊᴋᴍᴏᴘᴛᴜᴠᴡᴢ",  # Latin extensions and small capitals
    "aeopcyxijsdhlqwbkmhtABEKMHOPCTXIJSWQabeiknoptuxwABEZHIKMNOPTYXagiiyacdejkmoptuvwz",
)
_LEET: Final = str.maketrans("013457@$!|", "oieastasil")
_LEET_WORD: Final = re.compile(r"[\w@$!|]*[0-9@$!|][\w@$!|]*")
# A digit or sign written inside a word or at its start ("1gn0re", "d1sr3gard"); ids and
# amounts ("inv_000123", "95.00", "v2.3.1") are not leetspeak and need no reading.
_LEET_HINT: Final = re.compile(r"(?i)[a-z][0134579@$][a-z]|\b[0134579@$][a-z]{2}")
_SPACED: Final = re.compile(r"(?<!\S)(?:\w[ .\-_*·]){3,}\w(?!\S)")
_BASE64: Final = re.compile(r"[A-Za-z0-9+/_\-]{16,}={0,2}")
_ACCENTS_OR_ELONGATION: Final = re.compile("[\u0640]")
_MARKUP_NOISE: Final = re.compile(r"[*~`|\u00ad]")
_TAG_ANY: Final = re.compile(r"<[^<>]{0,500}>")


def _folded(text: str) -> str:
    """Accents, Arabic vowel marks and the elongation stroke out (``instrucción`` reads as
    ``instruccion``); kana keep their marks, since the patterns hold them."""
    decomposed = unicodedata.normalize("NFD", text)
    kept = "".join(
        char
        for char in decomposed
        if not (unicodedata.category(char) == "Mn" and char not in "\u3099\u309a")
    )
    return unicodedata.normalize("NFC", _ACCENTS_OR_ELONGATION.sub("", kept))


def _unspaced(text: str) -> str:
    """``i g n o r e`` and ``i.g.n.o.r.e`` read as ``ignore``."""
    return _SPACED.sub(lambda match: re.sub(r"[ .\-_*·]", "", match.group()) + " ", text)


def _decoded(text: str) -> Iterator[str]:
    """The readable text of every base64 run in ``text`` (standard or URL-safe)."""
    for match in _BASE64.finditer(text):
        run = match.group()
        padded = run + "=" * (-len(run) % 4)
        for altchars in (b"+/", b"-_"):
            try:
                raw = base64.b64decode(padded, altchars=altchars, validate=True)
                decoded = raw.decode("utf-8")
            except (binascii.Error, ValueError):
                continue
            if len(decoded) >= 6 and sum(c.isprintable() for c in decoded) >= 0.9 * len(decoded):
                yield decoded
                break


def views(text: str, depth: int = 0) -> Iterator[tuple[str, str]]:
    """What a detector reads of cleaned ``text``, as ``(view, kind)``: the text itself
    (``text``), markup stripped and entities and percent-escapes decoded (``plain``), the
    forms only an instruction scan reads (``read``: accents folded, look-alike letters and
    leetspeak mapped, spaced letters joined) and every base64 run opened (``decoded``)."""
    yield text, "text"
    seen = {text}
    plain = text if text.isascii() else clean_text(text)
    if "<" in plain:
        plain = _TAG_ANY.sub("", plain)
    if "&" in plain:
        plain = html.unescape(plain)
    if "%" in plain:
        plain = unquote(plain)
    plain = " ".join(_MARKUP_NOISE.sub("", plain).split())
    if plain not in seen:
        seen.add(plain)
        yield plain, "plain"
    # An instruction takes words: a text without a space (an id, a code, a hash) has no
    # other reading worth the scan.
    if " " in plain or not plain.isascii():
        read = [plain]
        if not plain.isascii():
            folded = _folded(plain)
            read += [folded, folded.translate(_LOOK_ALIKE)]
        mapped = read[-1]
        if _LEET_HINT.search(mapped):
            read.append(_LEET_WORD.sub(lambda m: m.group().translate(_LEET), mapped))
        read.append(_unspaced(read[-1]))
        for candidate in read:
            candidate = " ".join(candidate.split())
            if candidate not in seen:
                seen.add(candidate)
                yield candidate, "read"
    if depth < 2:
        for decoded in _decoded(text):
            for view, _ in views(clean_text(decoded), depth + 1):
                yield view, "decoded"


# A user and password pair on its own, as base64 wraps it ("admin:S3cr3t!").
_PAIR: Final = re.compile(r"^[\w.@\-]{1,64}:(?=\S*[\d\W])[^\s:]{6,128}$")


def inspect(text: str, *, email_domains: Iterable[str] = ()) -> tuple[bool, list[str]]:
    """Whether cleaned ``text`` addresses a model, and the kinds of secret it holds, read
    through every view (secrets in the text, its plain and its decoded forms). Addresses
    on ``email_domains`` (the adapter's declared hosts) are the service's own, no secret."""
    secrets: set[str] = set()
    instructions = False
    domains = tuple(email_domains)
    for view, kind in views(text):
        instructions = instructions or addresses_a_model(view)
        if kind != "read":
            secrets.update(find_secrets(view, allowed_domains=domains))
        if kind == "decoded" and _PAIR.fullmatch(view):
            secrets.add("credentials")
    return instructions, sorted(secrets)
