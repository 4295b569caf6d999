"""`GET /v1/models` and `GET /v1/models/{model}`: the base model and its served adapters."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request

from proxy.auth import require_access
from proxy.errors import ModelNotFound

router = APIRouter(prefix="/v1", dependencies=[Depends(require_access)])


def _card(name: str, created: int) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": "learnproxy"}


@router.get("/models")
async def list_models(request: Request) -> dict[str, Any]:
    created = request.app.state.started_at
    return {"object": "list", "data": [_card(n, created) for n in request.app.state.adapters.model_names()]}


@router.get("/models/{model:path}")
async def get_model(model: str, request: Request) -> dict[str, Any]:
    if model not in request.app.state.adapters.model_names():
        raise ModelNotFound(model)
    return _card(model, request.app.state.started_at)
