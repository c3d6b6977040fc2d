"""A write adapter with a secret input field, for the secrets-at-rest tests; its
downstream URL comes from ``TOOLSAFE_TEST_SECRET_URL``."""

from __future__ import annotations

import os
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, SecretStr

from toolsafe.adapters.http import HttpSettings, HttpWriteAdapter
from toolsafe.adapters.registry import Registry


class ConnectInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    account: str
    api_token: SecretStr
    note: str = ""


class Connect(HttpWriteAdapter[ConnectInput]):
    tool: ClassVar[str] = "connect_account"
    input_model: ClassVar[type[BaseModel]] = ConnectInput
    path: ClassVar[str] = "/connect"
    result_fields: ClassVar[tuple[str, ...]] = ("id",)

    def request_json(self, data: ConnectInput) -> dict[str, str]:  # type: ignore[override]
        return {"account": data.account, "token": data.api_token.get_secret_value()}


def register(registry: Registry) -> None:
    url = os.environ.get("TOOLSAFE_TEST_SECRET_URL", "http://127.0.0.1:9")
    registry.register(Connect(HttpSettings(base_url=url, read_timeout=5)))
