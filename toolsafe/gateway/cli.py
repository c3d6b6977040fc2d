"""``toolsafe serve`` (the HTTP gateway on uvicorn) and ``toolsafe keys``
(create, list, revoke the gateway's keys)."""

from __future__ import annotations

import argparse
import ipaddress
import json
import sys
from pathlib import Path
from typing import Any, Final

from toolsafe.settings import Settings, SettingsError

EMBEDDED_BROKER: Final = "toolsafe-broker"
EXIT_USAGE: Final = 2


def add_parser(commands: Any) -> None:
    serve = commands.add_parser("serve", help="run the HTTP gateway (docs/gateway.md)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=int, default=8080, help="port to listen on")
    serve.add_argument(
        "--no-auth",
        action="store_true",
        help="development mode without keys (loopback addresses only)",
    )
    serve.set_defaults(handler=serve_command)

    keys = commands.add_parser("keys", help="the gateway's keys").add_subparsers(
        dest="keys_command", required=True
    )
    create = keys.add_parser("create", help="a new key; its secret is shown once")
    create.add_argument("--name", required=True, help="the key's name (recorded as the actor)")
    create.add_argument(
        "--scope", required=True, choices=["agent", "operator"], help="what the key may do"
    )
    create.add_argument(
        "--namespace", default=None, help="prefix of the operation_refs it may touch"
    )
    create.add_argument("--json", action="store_true", help="print JSON instead of text")
    create.set_defaults(handler=keys_create)
    listing = keys.add_parser("list", help="every key (never a secret)")
    listing.add_argument("--json", action="store_true", help="print JSON instead of text")
    listing.set_defaults(handler=keys_list)
    revoke = keys.add_parser("revoke", help="revoke a key by name")
    revoke.add_argument("name", metavar="NAME", help="the key's name")
    revoke.set_defaults(handler=keys_revoke)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def embedded(settings: Settings) -> tuple[Settings, bool]:
    """With neither TOOLSAFE_DATABASE_URL nor TOOLSAFE_BROKER_URL set, the embedded
    default: the SQLite file ``toolsafe.db`` and a file-system broker beside it."""
    if settings.was_set("TOOLSAFE_DATABASE_URL") or settings.was_set("TOOLSAFE_BROKER_URL"):
        return settings, False
    folder = Path.cwd() / EMBEDDED_BROKER
    for part in ("queue", "control", "processed"):
        (folder / part).mkdir(parents=True, exist_ok=True)
    return settings.replace(broker={"url": f"filesystem://{folder}"}), True


def _say(line: str) -> None:
    sys.stderr.write(f"toolsafe serve: {line}\n")
    sys.stderr.flush()


def serve_command(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from toolsafe.gateway.app import create_gateway
    except ImportError as error:
        _say(f"the gateway needs its extra: pip install 'toolsafe[gateway]' ({error.name})")
        return EXIT_USAGE
    try:
        settings = Settings.from_env()
    except SettingsError as error:
        _say(f"error: {error}")
        return EXIT_USAGE
    if args.no_auth and not is_loopback(args.host):
        _say(f"error: --no-auth is allowed only on a loopback address, not {args.host}")
        return EXIT_USAGE
    settings, is_embedded = embedded(settings)
    if is_embedded:
        from toolsafe.recovery.db import migrate

        migrate(settings.store.url)
        broker = settings.broker.url
        _say(f"embedded default: store {settings.store.url} (migrated), broker {broker}")
        _say(f"run workers here with TOOLSAFE_BROKER_URL={broker}")
        _say("(`toolsafe up` runs the gateway, a worker and beat together)")
    if args.no_auth:
        _say(
            f"DEVELOPMENT MODE: no keys are checked; every caller on {args.host} acts as "
            "an operator. Never expose this."
        )
    app = create_gateway(settings, auth=not args.no_auth)
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level="info",
        access_log=False,
        # h11 refuses a request head beyond this on its own; ours answers 431 below it.
        h11_max_incomplete_event_size=settings.gateway.max_header * 2,
        timeout_graceful_shutdown=5,
    )
    server = uvicorn.Server(config)
    _say(f"listening on http://{args.host}:{args.port} (OpenAPI at /openapi.json)")
    server.run()
    return 0


def _keys() -> Any:
    from toolsafe.recovery.store import open_store

    return open_store(Settings.from_env().store.url).keys


def _now() -> Any:
    from toolsafe.tasks.runtime import utcnow

    return utcnow()


def keys_create(args: argparse.Namespace) -> int:
    created = _keys().create(args.name, args.scope, args.namespace, now=_now())
    key = created.key
    if args.json:
        data = {"name": key.name, "scope": key.scope, "namespace": key.namespace}
        sys.stdout.write(json.dumps({**data, "token": created.token}) + "\n")
    else:
        sys.stdout.write(
            f"key {key.name} ({key.scope}, namespace {key.namespace or '-'})\n"
            f"token {created.token}\n"
            "This token is shown once; only its hash is stored. Send it as "
            "'Authorization: Bearer <token>'.\n"
        )
    return 0


def keys_list(args: argparse.Namespace) -> int:
    found = _keys().list()
    if args.json:
        rows = [
            {
                "name": key.name,
                "scope": key.scope,
                "namespace": key.namespace,
                "created_at": key.created_at.isoformat(),
                "revoked_at": key.revoked_at.isoformat() if key.revoked_at else None,
            }
            for key in found
        ]
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return 0
    sys.stdout.write(f"{'name':<30} {'scope':<9} {'namespace':<24} status\n")
    for key in found:
        status = "active" if key.active else f"revoked {key.revoked_at:%Y-%m-%d %H:%M}"
        sys.stdout.write(f"{key.name:<30} {key.scope:<9} {key.namespace or '-':<24} {status}\n")
    return 0


def keys_revoke(args: argparse.Namespace) -> int:
    key = _keys().revoke(args.name, now=_now())
    sys.stdout.write(f"key {key.name} revoked\n")
    return 0
