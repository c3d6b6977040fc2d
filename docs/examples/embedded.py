"""What the examples run against: by default an embedded toolsafe of their own (a SQLite
store, Celery's file-system broker, the example downstream and one real worker, in a
temporary folder, as ``toolsafe demo`` does); with ``--use-environment``, the toolsafe your
``TOOLSAFE_*`` settings name (its workers already running)."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator

from toolsafe import Client


@contextlib.contextmanager
def toolsafe_client() -> Iterator[Client]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--use-environment", action="store_true",
                        help="use the toolsafe the TOOLSAFE_* settings name")  # fmt: skip
    if parser.parse_args().use_environment:
        client = Client()
        try:
            yield client
        finally:
            client.close()
        return
    from toolsafe.demo.env import make_folder, open_env, remove_folder

    folder = make_folder()
    env = open_env(folder, None, None, say=lambda line: None)
    try:
        env.start_workers(1)
        yield env.client
    finally:
        env.close()
        env.client.close()
        remove_folder(folder)
