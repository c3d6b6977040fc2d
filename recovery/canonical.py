"""Canonical hashing of tool input: the same input always gives the same hash."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any


def canonical_json(value: Mapping[str, Any]) -> str:
    """Sorted keys, no whitespace, UTF-8 kept: key order and spacing never matter."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def input_hash(value: Mapping[str, Any]) -> str:
    """``sha256:<hex>`` of the canonical JSON."""
    digest = hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()
    return f"sha256:{digest}"


def changed_fields(old: Mapping[str, Any], new: Mapping[str, Any]) -> frozenset[str]:
    """Top-level keys whose canonical value differs (added and removed keys included)."""
    keys = set(old) | set(new)
    return frozenset(
        key
        for key in keys
        if key not in old
        or key not in new
        or json.dumps(old[key], sort_keys=True) != json.dumps(new[key], sort_keys=True)
    )
