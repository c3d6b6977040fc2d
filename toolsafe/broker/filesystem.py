"""Celery's file-system transport with atomic writes: the broker of the embedded demo
(``filesystem:///folder``), shared by every process on one machine without a server.

kombu's own transport creates a message file and then writes into it, so a consumer in
another process can take the file while it is still empty, and its worker dies on the
JSON error. Here a message is written under a name no consumer reads, then renamed into
place; a rename within one folder is atomic on POSIX.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


class Channel(filesystem.Channel):
    # kombu's file-system channel already differs from its base here; keep its signature.
    def _put(self, queue: Any, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]
        folder = str(self.data_folder_out)
        # The same name scheme as kombu's (time first, so folder order is FIFO).
        name = f"{round(time.monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        # No "." in the partial name: consumers match "<...>.<queue>.msg" only.
        partial = os.path.join(folder, f"partial-{uuid.uuid4().hex}")
        try:
            with open(partial, "wb") as file:
                file.write(str_to_bytes(dumps(payload)))  # type: ignore[no-untyped-call]
            os.replace(partial, os.path.join(folder, name))
        except OSError as error:
            raise ChannelError(f"cannot add a message to {folder!r}") from error


class Transport(filesystem.Transport):
    Channel = Channel
