"""``GET /v1/tools``: every registered tool with its input and output schema."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from toolsafe.adapters.envelope import json_schema
from toolsafe.gateway.auth import Caller
from toolsafe.gateway.models import ToolInfo, ToolList
from toolsafe.gateway.problems import documented
from toolsafe.gateway.state import Gateway, gateway

router = APIRouter(tags=["tools"])


@router.get(
    "/tools",
    response_model=ToolList,
    summary="The registered tools",
    responses={401: documented("no key, or an unknown or revoked one")},
)
def list_tools(_: Caller, state: Annotated[Gateway, Depends(gateway)]) -> ToolList:
    registry = state.client.runtime.registry
    output = json_schema()
    tools = []
    for name in registry.tools():
        adapter = registry.get(name)
        tools.append(
            ToolInfo(
                name=name,
                description=adapter.describe(),
                writes=adapter.writes,
                has_lookup=adapter.has_lookup,
                input_schema=adapter.input_model.model_json_schema(),
                output_schema=output,
            )
        )
    return ToolList(tools=tools)
