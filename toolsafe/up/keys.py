"""The two keys ``toolsafe up`` prints: made once, their tokens kept in the folder
(mode 0600) and reused while they still verify; only their hashes are in the store."""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from toolsafe.recovery.store.keys import KeysPort
from toolsafe.tasks.runtime import utcnow


@dataclass(frozen=True)
class UpKeys:
    operator: str
    agent: str
    agent_namespace: str
    reused: bool


def keys_for(store: KeysPort, folder: Path) -> UpKeys:
    """The keys of ``folder/keys.json`` if both still verify, else two new ones."""
    path = folder / "keys.json"
    if path.exists():
        try:
            saved = json.loads(path.read_text())
            operator = store.verify(str(saved["operator"]))
            agent = store.verify(str(saved["agent"]))
        except (ValueError, KeyError, TypeError):
            operator = agent = None
        if (
            operator is not None
            and agent is not None
            and operator.scope == "operator"
            and agent.scope == "agent"
        ):
            return UpKeys(saved["operator"], saved["agent"], agent.namespace or "", True)
    # New names each time: a name is never reused, even after a revocation.
    suffix = secrets.token_hex(3)
    now = utcnow()
    operator_made = store.create(f"up-operator-{suffix}", "operator", None, now=now)
    agent_made = store.create(f"up-agent-{suffix}", "agent", None, now=now)
    data = {"operator": operator_made.token, "agent": agent_made.token}
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        json.dump(data, file)
    namespace = agent_made.key.namespace or ""
    return UpKeys(operator_made.token, agent_made.token, namespace, False)
