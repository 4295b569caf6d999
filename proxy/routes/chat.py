"""`POST /v1/chat/completions`: parse, hand to the chat service, answer JSON or SSE."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from proxy.auth import require_access
from proxy.errors import InvalidRequest
from proxy.protocol import parse_chat_request
from proxy.serving_chat import ChatService, hints_from

router = APIRouter(prefix="/v1", dependencies=[Depends(require_access)])

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def _decode(body: bytes) -> Any:
    if not body:
        raise InvalidRequest("The request body is empty; send a JSON object.")
    try:
        return json.loads(body)
    except ValueError:
        raise InvalidRequest("We could not parse the JSON body of your request.") from None


@router.post("/chat/completions")
async def chat_completions(request: Request) -> Response:
    # The body is read by hand: FastAPI's own parsing would answer bad JSON with a 422.
    payload = _decode(await request.body())
    req = parse_chat_request(payload)
    hints = hints_from(request.headers, req)
    client = {
        "user_agent": request.headers.get("user-agent"),
        "host": request.client.host if request.client else None,
        "client_request_id": request.headers.get("x-client-request-id"),
    }
    service: ChatService = request.app.state.chat
    run = await service.start(req, payload, hints, client)
    if req.stream:
        return StreamingResponse(run.sse(), media_type="text/event-stream", headers=SSE_HEADERS)
    return JSONResponse(await run.collect())
