"""Messages waiting in each of toolsafe's broker queues, read when scraped: one pipelined
round trip of ``LLEN`` on Redis, a directory listing for the file-system broker.

Celery's Redis transport keeps a queue as a list under its name, and a message published
with a priority under ``<name>\\x06\\x16<priority>``: the depth is the sum of those lists.
ETA messages a worker already holds are not in any list (see docs/operations.md).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Final

import redis

from toolsafe.settings_parse import filesystem_folder

PRIORITY_SEPARATOR: Final = "\x06\x16"
PRIORITY_STEPS: Final = (3, 6, 9)  # kombu's default steps above 0 (0 is the plain name)


class QueueDepth:
    """``depths()`` → messages per queue, or None for a broker it cannot read."""

    def __init__(self, broker_url: str, queues: Sequence[str], timeout: float = 1.0) -> None:
        self.queues = tuple(queues)
        self.folder = filesystem_folder(broker_url)
        self.redis: redis.Redis | None = None
        if broker_url.startswith(("redis://", "rediss://", "unix://")):
            self.redis = redis.Redis.from_url(
                broker_url, socket_timeout=timeout, socket_connect_timeout=timeout
            )

    @property
    def readable(self) -> bool:
        return self.redis is not None or self.folder is not None

    def depths(self) -> dict[str, int] | None:
        if self.redis is not None:
            return self._redis(self.redis)
        if self.folder is not None:
            return self._files(self.folder)
        return None

    def _redis(self, client: redis.Redis) -> dict[str, int]:
        pipe = client.pipeline(transaction=False)
        for queue in self.queues:
            pipe.llen(queue)
            for step in PRIORITY_STEPS:
                pipe.llen(f"{queue}{PRIORITY_SEPARATOR}{step}")
        lengths = [int(n) for n in pipe.execute()]
        per_queue = len(PRIORITY_STEPS) + 1
        return {
            queue: sum(lengths[i * per_queue : (i + 1) * per_queue])
            for i, queue in enumerate(self.queues)
        }

    def _files(self, folder: str) -> dict[str, int]:
        found = dict.fromkeys(self.queues, 0)
        try:
            names = os.listdir(os.path.join(folder, "queue"))
        except FileNotFoundError:
            return found
        for name in names:
            # "<stamp>_<uuid>.<queue>.msg" (toolsafe.broker.filesystem)
            if name.endswith(".msg"):
                queue = name[: -len(".msg")].partition(".")[2]
                if queue in found:
                    found[queue] += 1
        return found

    def close(self) -> None:
        if self.redis is not None:
            self.redis.close()
