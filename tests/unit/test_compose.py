"""docker-compose.yml and the Dockerfile, checked without a Docker engine: every command
a service runs exists in the toolsafe CLI (its own argparse parser), every ``TOOLSAFE_*``
setting passed is one toolsafe reads, and the durability settings of DESIGN §8 are there."""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Mapping
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
import yaml

from toolsafe.cli.main import build_parser
from toolsafe.settings import Settings, known_variables

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"

# What a user exports before `docker compose up` (the compose file demands both).
USER_ENV = {"POSTGRES_PASSWORD": "s3cret", "FLOWER_BASIC_AUTH": "admin:s3cret"}

_VARIABLE = re.compile(r"\$\{(?P<name>[A-Z0-9_]+)(?:(?P<op>:[-?])(?P<arg>[^}]*))?\}")


class Unset(LookupError):
    pass


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """Compose's ``${VAR}``, ``${VAR:-default}`` and ``${VAR:?error}``; ``$$`` is ``$``."""

    def _one(match: re.Match[str]) -> str:
        name, op, arg = match["name"], match["op"], match["arg"]
        value = env.get(name, "")
        if value:
            return value
        if op == ":?":
            raise Unset(f"{name}: {arg}")
        return arg or ""

    return _VARIABLE.sub(_one, text).replace("$$", "$")


def _resolve(node: Any, env: Mapping[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, list):
        return [_resolve(item, env) for item in node]
    if isinstance(node, dict):
        return {key: _resolve(value, env) for key, value in node.items()}
    return node


def load(env: Mapping[str, str] = USER_ENV) -> dict[str, Any]:
    raw = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    resolved: dict[str, Any] = _resolve(raw, env)
    return resolved


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load()


@pytest.fixture(autouse=True)
def _own_default_app(monkeypatch: pytest.MonkeyPatch) -> None:
    """`celery -A toolsafe` builds the process's default app; keep ours out of other tests."""
    import toolsafe.tasks.app

    monkeypatch.setattr(toolsafe.tasks.app, "_default", None)


def _services(compose: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = compose["services"]
    return services


def _ours(compose: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The services that run the toolsafe image (built from the Dockerfile)."""
    return {name: svc for name, svc in _services(compose).items() if svc.get("build")}


def _environment(service: Mapping[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(key): str(value) for key, value in env.items()}


def variables_toolsafe_reads(env: Mapping[str, str], _: pytest.MonkeyPatch) -> set[str]:
    """Ask the settings which ``TOOLSAFE_*`` variables toolsafe reads: its own, and those
    of the adapter modules ``env`` names (the example adapters read their downstream's URL).
    """
    return set(known_variables({**os.environ, **env}))


# ----------------------------------------------------------------------------- commands


def _check_celery_options(command: str, extra: list[str]) -> None:
    """Options given to ``celery worker|beat|inspect`` exist there."""
    from celery.bin.beat import beat
    from celery.bin.control import inspect
    from celery.bin.worker import worker

    click_command = {"worker": worker, "beat": beat, "inspect": inspect}[command]
    known = {name for param in click_command.params for name in param.opts}
    for option in (item.split("=")[0] for item in extra if item.startswith("-")):
        assert option in known, f"celery {command} has no option {option}"


def _check_command(argv: list[str]) -> None:
    program, args = argv[0], argv[1:]
    if program == "toolsafe":
        # As toolsafe.cli.main.main parses: options it does not know go through to celery only
        # for the commands that say so (worker, beat), and must be celery's own.
        try:
            parsed, extra = build_parser().parse_known_args(args)
        except SystemExit as error:
            pytest.fail(f"`{shlex.join(argv)}` is not a valid toolsafe command ({error})")
        extra = [item for item in extra if item != "--"]
        if extra:
            assert getattr(parsed, "passthrough", False), f"{argv}: unknown options {extra}"
            _check_celery_options(parsed.command, extra)
    elif program == "celery":
        assert args[:2] == ["-A", "toolsafe"], f"{argv}: celery must load the toolsafe app"
        from celery import Celery
        from celery.app.utils import find_app

        assert isinstance(find_app("toolsafe"), Celery)
        subcommand = args[2]
        builtin = {"worker", "beat", "inspect"}
        plugins = {entry.name for entry in entry_points(group="celery.commands")}
        assert subcommand in builtin | plugins, f"{argv}: no celery subcommand {subcommand!r}"
        if subcommand in builtin:
            _check_celery_options(subcommand, args[3:])
    elif program == "python" and args[:1] == ["-m"]:
        module = args[1]
        assert importlib.util.find_spec(module) is not None, f"{argv}: no module {module}"
        help_text = subprocess.run(
            [sys.executable, "-m", module, "--help"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
            cwd=ROOT,
        ).stdout
        for option in (arg for arg in args[2:] if arg.startswith("--")):
            assert option.split("=")[0] in help_text, f"{argv}: {module} has no {option}"
    elif program == "python" and args[:1] == ["-c"]:
        compile(args[1], "<healthcheck>", "exec")
    else:
        pytest.fail(f"{argv}: a command toolsafe's image does not provide")


def test_a_wrong_command_would_be_caught() -> None:
    with pytest.raises(pytest.fail.Exception):
        _check_command(["toolsafe", "no-such-command"])
    with pytest.raises(AssertionError, match="no option --node-nmae"):
        _check_command(["toolsafe", "worker", "--node-nmae", "w@%h"])
    with pytest.raises(AssertionError, match="unknown options"):
        _check_command(["toolsafe", "migrate", "--force"])
    with pytest.raises(AssertionError, match="no option --timeuot"):
        _check_command(["celery", "-A", "toolsafe", "inspect", "ping", "--timeuot", "5"])


# ----------------------------------------------------------------------------- settings


def test_every_toolsafe_setting_passed_is_one_toolsafe_reads(
    compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, service in _ours(compose).items():
        env = _environment(service)
        passed = {key for key in env if key.startswith("TOOLSAFE_")}
        if not passed:
            continue
        read = variables_toolsafe_reads(env, monkeypatch)
        assert passed <= read, f"{name} passes settings toolsafe never reads: {passed - read}"
        settings = Settings.from_env({**env})  # the values are valid, too
        assert settings.broker.url.startswith("redis://redis:")
        assert settings.store.url.startswith("postgresql+psycopg://")


def test_a_misspelt_setting_would_be_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    read = variables_toolsafe_reads({"TOOLSAFE_BROKER_URLL": "redis://x"}, monkeypatch)
    assert "TOOLSAFE_BROKER_URL" in read
    assert "TOOLSAFE_BROKER_URLL" not in read


def test_every_toolsafe_process_gets_the_same_settings(compose: dict[str, Any]) -> None:
    ours = _ours(compose)
    settings = {
        name: {k: v for k, v in _environment(svc).items() if k.startswith("TOOLSAFE_")}
        for name, svc in ours.items()
        if name != "downstream"
    }
    assert set(settings) >= {"migrate", "worker", "beat", "flower", "gateway"}
    first = settings["worker"]
    assert all(values == first for values in settings.values()), settings


def test_secrets_have_no_defaults() -> None:
    for missing in USER_ENV:
        env = {k: v for k, v in USER_ENV.items() if k != missing}
        with pytest.raises(Unset, match=missing):
            load(env)


# ----------------------------------------------------------------------------- services


def test_redis_keeps_messages(compose: dict[str, Any]) -> None:
    redis = _services(compose)["redis"]
    command = " ".join(redis["command"])
    assert "--appendonly yes" in command
    assert "--maxmemory-policy noeviction" in command
    assert any(str(volume).endswith(":/data") for volume in redis["volumes"])


def test_postgres_has_a_volume(compose: dict[str, Any]) -> None:
    postgres = _services(compose)["postgres"]
    assert any("/var/lib/postgresql/data" in str(volume) for volume in postgres["volumes"])
    named = {str(volume).split(":")[0] for volume in postgres["volumes"]}
    assert named <= set(compose["volumes"])


def test_migration_runs_once_before_workers_and_beat(compose: dict[str, Any]) -> None:
    services = _services(compose)
    assert services["migrate"]["command"] == ["toolsafe", "migrate"]
    assert services["migrate"]["restart"] == "no"
    for name in ("worker", "beat"):
        assert services[name]["depends_on"]["migrate"] == {
            "condition": "service_completed_successfully"
        }


def test_workers_scale(compose: dict[str, Any]) -> None:
    worker = _services(compose)["worker"]
    # Fixed names or host ports would make `--scale worker=4` fail.
    assert "container_name" not in worker
    assert "ports" not in worker
    command = worker["command"]
    node = command[command.index("-n") + 1]
    assert "%h" in node, "each replica needs its own node name"
    assert worker["healthcheck"]["test"]


def test_the_gateway_serves_with_keys_after_the_migration(compose: dict[str, Any]) -> None:
    gateway = _services(compose)["gateway"]
    command = gateway["command"]
    assert command[:2] == ["toolsafe", "serve"] and "--no-auth" not in command
    port = command[command.index("--port") + 1]
    assert f"{port}:{port}" in gateway["ports"]
    assert command[command.index("--host") + 1] == "0.0.0.0"
    assert gateway["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}
    assert any("/healthz" in part for part in gateway["healthcheck"]["test"])


def test_the_image_can_run_the_gateway() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert "p['project']['optional-dependencies']['gateway']" in text


def test_exactly_one_beat(compose: dict[str, Any]) -> None:
    beat = _services(compose)["beat"]
    assert beat["command"] == ["toolsafe", "beat"]
    assert beat["container_name"], "a fixed name makes `--scale beat=2` fail"


def test_flower_uses_basic_auth_from_the_environment(compose: dict[str, Any]) -> None:
    raw = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    flower = raw["services"]["flower"]
    assert flower["environment"]["FLOWER_BASIC_AUTH"].startswith("${FLOWER_BASIC_AUTH:?")
    assert _environment(_services(compose)["flower"])["FLOWER_BASIC_AUTH"] == "admin:s3cret"


def test_long_running_services_restart_and_report_health(compose: dict[str, Any]) -> None:
    for name, service in _services(compose).items():
        if name == "migrate":
            continue
        # toolsafe's own processes exit non-zero on failure only (docs/operations.md).
        wanted = "on-failure" if name in {"worker", "beat", "gateway"} else "unless-stopped"
        assert service["restart"] == wanted, name
        if name != "beat":  # beat has no endpoint; its container_name keeps it single
            assert service["healthcheck"]["test"], name


# ----------------------------------------------------------------------------- image


def test_dockerfile_installs_every_package_and_drops_root() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    packages = [
        name.rstrip("*") for name in project["tool"]["setuptools"]["packages"]["find"]["include"]
    ]
    # The package links the top-level rooms in (toolsafe/tasks -> ../tasks, ...): the
    # image needs both the package and every room it links.
    linked = sorted(path.name for path in (ROOT / "toolsafe").iterdir() if path.is_symlink())
    assert linked == ["adapters", "celeryconfig.py", "recovery", "tasks"]
    copied = set(re.findall(r"^COPY (\S+)", text, flags=re.MULTILINE))
    for name in (*packages, *linked):
        assert name in copied, f"the Dockerfile does not copy {name}"
    assert re.search(r"^RUN pip install (--no-deps )?\.", text, flags=re.MULTILINE)
    # The dependencies it installs first are pyproject's, read from the file itself.
    assert "p['project']['dependencies']" in text
    users = re.findall(r"^USER (\S+)", text, flags=re.MULTILINE)
    assert users and users[-1] not in {"root", "0"}


def test_the_image_copies_only_what_exists() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    for line in re.findall(r"^COPY (.+) \S+$", text, flags=re.MULTILINE):
        for source in line.split():
            assert (ROOT / source).exists(), f"COPY {source}: no such file"


def test_the_operations_page_describes_this_compose_file(compose: dict[str, Any]) -> None:
    page = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    section = page.split("## Docker Compose", 1)[1].split("\n## ", 1)[0]
    described = set(re.findall(r"^\| `([a-z]+)` \|", section, flags=re.MULTILINE))
    assert described == set(_services(compose))
    for command in re.findall(r"docker compose run --rm \w+ (toolsafe [^`]+)`", section):
        _check_command(shlex.split(command))
