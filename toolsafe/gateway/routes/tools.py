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
    output = json_schema()
    return ToolList(
        tools=[
            ToolInfo(
                name=spec.name,
                title=spec.title,
                description=spec.description,
                writes=spec.writes,
                has_lookup=spec.has_lookup,
                max_attempts=spec.max_attempts,
                input_schema=dict(spec.input_schema),
                output_schema=output,
            )
            for spec in state.client.catalogue()
        ]
    )
