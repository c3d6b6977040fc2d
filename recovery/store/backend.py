"""One way in: :func:`open_store` picks the backend by the URL's scheme and returns it
opened, with its steps (the port), its feed and the optional features it has.

The schemes toolsafe ships (``memory://``, ``sqlite://``, ``postgresql://`` and the
driver forms such as ``postgresql+psycopg://``) are named here by module path, so
nothing below the ground floor is imported until a URL asks for it (as Celery's
``BACKEND_ALIASES`` and ``by_url`` do). A package adds a backend under the
``toolsafe.stores`` entry point group (name: the scheme; value: ``module:opener``), or a
program with :func:`register_store`. An opener takes the URL and :class:`StoreOptions`
and returns a :class:`Backend`.

A feature the backend lacks (``keys``, ``overview``, ``tally``, ``retention``,
``workers``, ``clock``, ``loop_reads``) raises
:class:`~toolsafe.recovery.store.errors.FeatureMissing`, naming the backend and the
feature, when it is asked for.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Final, TypeVar

from toolsafe.recovery.store.clock import ClockPort
from toolsafe.recovery.store.errors import FEATURES, FeatureMissing, UnknownStore
from toolsafe.recovery.store.feed import Feed
from toolsafe.recovery.store.keys import KeysPort
from toolsafe.recovery.store.loop_reads import LoopReadsPort
from toolsafe.recovery.store.overview import OverviewPort
from toolsafe.recovery.store.port import StorePort
from toolsafe.recovery.store.retention import RetentionPort
from toolsafe.recovery.store.tally import TallyPort
from toolsafe.recovery.store.workers import WorkersPort

__all__ = [
    "ENTRY_POINT_GROUP",
    "Backend",
    "Opener",
    "StoreOptions",
    "known_schemes",
    "open_store",
    "register_store",
    "scheme_of",
    "serves",
]

ENTRY_POINT_GROUP: Final = "toolsafe.stores"

T = TypeVar("T")


@dataclass(frozen=True)
class StoreOptions:
    """How a process opens its store. ``pre_ping=False`` saves a round trip per
    transaction where the store's infrastructure retry covers a connection that died
    while pooled (a worker's pool processes); ``poll_interval`` is how often a feed
    that polls (SQLite's) looks for new events."""

    pre_ping: bool = True
    poll_interval: float = 0.05


class Backend:
    """An opened store: ``steps`` (every caller's port), ``feed`` (push completion) and
    the optional features, each raising ``FeatureMissing`` when the backend lacks it."""

    def __init__(
        self,
        name: str,
        steps: StorePort,
        *,
        keys: KeysPort | None = None,
        overview: OverviewPort | None = None,
        tally: TallyPort | None = None,
        retention: RetentionPort | None = None,
        workers: WorkersPort | None = None,
        clock: ClockPort | None = None,
        loop_reads: Callable[[], LoopReadsPort] | None = None,
        close: Callable[[], None] | None = None,
    ) -> None:
        self.name = name
        self.steps = steps
        self._keys = keys
        self._overview = overview
        self._tally = tally
        self._retention = retention
        self._workers = workers
        self._clock = clock
        self._loop_reads = loop_reads
        self._close = close

    @property
    def feed(self) -> Feed:
        return self.steps.feed

    def _feature(self, feature: str, found: T | None) -> T:
        if found is None:
            raise FeatureMissing(self.name, feature)
        return found

    @property
    def keys(self) -> KeysPort:
        """The gateway's API keys."""
        return self._feature("keys", self._keys)

    @property
    def overview(self) -> OverviewPort:
        """The status page's counts and pages."""
        return self._feature("overview", self._overview)

    @property
    def tally(self) -> TallyPort:
        """The metrics exporter's reading of the event log."""
        return self._feature("tally", self._tally)

    @property
    def retention(self) -> RetentionPort:
        """Purge and re-sealing of stored inputs."""
        return self._feature("retention", self._retention)

    @property
    def workers(self) -> WorkersPort:
        """The workers' heartbeats."""
        return self._feature("workers", self._workers)

    @property
    def clock(self) -> ClockPort:
        """The database's time (``toolsafe.tasks.clock`` measures this process's offset
        from it)."""
        return self._feature("clock", self._clock)

    @property
    def loop_reads(self) -> Callable[[], LoopReadsPort]:
        """Opens a step's reads for the running event loop (``loop_reads.py``); the
        caller closes them (``aclose``) on that loop."""
        return self._feature("loop_reads", self._loop_reads)

    def has(self, feature: str) -> bool:
        """Whether the backend has ``feature`` (one of ``errors.FEATURES``)."""
        if feature not in FEATURES:
            raise ValueError(f"unknown store feature {feature!r}; one of {sorted(FEATURES)}")
        found = {
            "keys": self._keys,
            "overview": self._overview,
            "tally": self._tally,
            "retention": self._retention,
            "workers": self._workers,
            "clock": self._clock,
            "loop_reads": self._loop_reads,
        }
        return found[feature] is not None

    def close(self) -> None:
        """Stop the feed and release what the backend holds (connections); the backend
        is not used again after."""
        self.feed.close()
        if self._close is not None:
            self._close()

    def __repr__(self) -> str:
        features = [feature for feature in FEATURES if self.has(feature)]
        return f"<Backend {self.name} with {', '.join(features) or 'no optional features'}>"


Opener = Callable[[str, StoreOptions], Backend]

# The shipped backends, by module path: imported when a URL first asks for one.
BUILTIN: Final[dict[str, str]] = {
    "memory": "toolsafe.recovery.store.memory.backend:open_memory",
    "sqlite": "toolsafe.recovery.store.sql.backend:open_sql",
    "postgresql": "toolsafe.recovery.store.sql.backend:open_sql",
    "postgres": "toolsafe.recovery.store.sql.backend:open_sql",
}
_registered: dict[str, Opener | str] = {}
_lock = threading.Lock()


def register_store(scheme: str, opener: Opener | str) -> None:
    """Serve ``scheme://`` URLs with ``opener`` (or the ``module:attribute`` naming it),
    in this process, before the shipped and entry-point backends."""
    if not scheme or "://" in scheme or scheme != scheme.lower():
        raise ValueError(f"a scheme is lower case, without '://', not {scheme!r}")
    with _lock:
        _registered[scheme] = opener


def scheme_of(url: str) -> str:
    """The scheme of a store URL, lower case (``postgresql+psycopg`` for
    ``postgresql+psycopg://...``); ``UnknownStore`` when there is none."""
    scheme, found, _ = url.partition("://")
    if not found or not scheme:
        raise UnknownStore(url, known_schemes())
    return scheme.lower()


def _entry_points() -> dict[str, str]:
    return {point.name: point.value for point in entry_points(group=ENTRY_POINT_GROUP)}


def known_schemes() -> list[str]:
    """Every scheme a backend is known for: registered, shipped, or by entry point."""
    with _lock:
        registered = set(_registered)
    return sorted(registered | set(BUILTIN) | set(_entry_points()))


def _load(target: Opener | str) -> Opener:
    if not isinstance(target, str):
        return target
    module, _, attribute = target.partition(":")
    opener: Opener = getattr(importlib.import_module(module), attribute)
    return opener


def _opener(scheme: str) -> Opener | str | None:
    """The exact scheme first (a package may claim ``x+driver``), then its base."""
    base = scheme.partition("+")[0]
    with _lock:
        registered = dict(_registered)
    points: dict[str, str] | None = None
    for name in (scheme, base):
        if name in registered:
            return registered[name]
        if points is None:
            points = _entry_points()
        if name in points:
            return points[name]
        if name in BUILTIN:
            return BUILTIN[name]
    return None


def serves(url: str) -> bool:
    """Whether some backend is known for ``url``'s scheme (nothing is imported)."""
    try:
        return _opener(scheme_of(url)) is not None
    except UnknownStore:
        return False


def open_store(url: str, options: StoreOptions | None = None) -> Backend:
    """The backend for ``url``, opened for this process; ``UnknownStore`` for a scheme
    no backend serves."""
    target = _opener(scheme_of(url))
    if target is None:
        raise UnknownStore(url, known_schemes())
    return _load(target)(url, options or StoreOptions())
