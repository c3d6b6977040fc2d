"""A failed-over PostgreSQL is reached through a multi-host URL (DESIGN §8): libpq's
``h1:5432,h2:5433`` form and SQLAlchemy's ``?host=h1:5432&host=h2:5433`` form both
reach psycopg with every host and ``target_session_attrs``; passwords stay hidden."""

from __future__ import annotations

import pytest

from toolsafe.chaos.report import hide_password
from toolsafe.recovery.db import libpq_conninfo, multi_host_query, normalize_url
from toolsafe.recovery.store.backend import scheme_of, serves
from toolsafe.settings import Settings

LIBPQ_FORM = (
    "postgresql+psycopg://app:s3cret@db1:5432,db2:5433/steps?target_session_attrs=read-write"
)
QUERY_FORM = (
    "postgresql+psycopg://app:s3cret@/steps"
    "?host=db1:5432&host=db2:5433&target_session_attrs=read-write"
)


@pytest.mark.parametrize("url", [LIBPQ_FORM, QUERY_FORM])
def test_both_forms_reach_psycopg_with_every_host(url: str) -> None:
    conninfo = libpq_conninfo(url)
    for part in (
        "host=db1,db2", "port=5432,5433", "dbname=steps", "user=app", "password=s3cret",
        "target_session_attrs=read-write",
    ):  # fmt: skip
        assert part in conninfo.split(), conninfo
    parsed = normalize_url(url)
    assert parsed.drivername == "postgresql+psycopg"
    assert "s3cret" not in str(parsed)  # SQLAlchemy's own rendering hides it


def test_the_libpq_form_becomes_a_query_form() -> None:
    assert multi_host_query(LIBPQ_FORM) == (
        "postgresql+psycopg://app:s3cret@/steps"
        "?host=db1,db2&port=5432,5433&target_session_attrs=read-write"
    )
    # A host without a port gets PostgreSQL's; a single-host URL is left alone.
    assert multi_host_query("postgres://u@a,b:6000/d") == "postgres://u@/d?host=a,b&port=5432,6000"
    single = "postgresql://u:p@a:6000/d?sslmode=require"
    assert multi_host_query(single) == single
    # IPv6 addresses in brackets, as URLs write them; libpq wants them bare.
    bracketed = "postgresql://u@[::1],[fd00::2]:6000/d"
    assert "host=::1,fd00::2 port=5432,6000" in libpq_conninfo(bracketed)


@pytest.mark.parametrize("url", [LIBPQ_FORM, QUERY_FORM])
def test_settings_and_store_selection_take_a_multi_host_url(url: str) -> None:
    assert scheme_of(url) == "postgresql+psycopg"
    assert serves(url)
    settings = Settings.from_env({"TOOLSAFE_DATABASE_URL": url})
    assert settings.store.url == url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (LIBPQ_FORM, LIBPQ_FORM.replace("s3cret", "***")),
        (
            "postgresql://app@/steps?host=db1:5432&password=s3cret&host=db2:5433",
            "postgresql://app@/steps?host=db1:5432&password=***&host=db2:5433",
        ),
    ],
)
def test_printed_urls_hide_the_password_wherever_it_is(url: str, shown: str) -> None:
    assert hide_password(url) == shown
