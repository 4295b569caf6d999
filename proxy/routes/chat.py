"""`POST /v1/chat/completions`: parse, hand to the chat service, answer JSON or SSE."""

from __future__ import annotations

import asyncio
import contextlib
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
DISCONNECT_POLL_S = 0.25
CLIENT_CLOSED = 499  # nginx's code for a client that left first; nobody reads this response


async def _until_disconnected(request: Request) -> None:
    while not await request.is_disconnected():
        await asyncio.sleep(DISCONNECT_POLL_S)


async def _collect_unless_gone(request: Request, collect: Any) -> Response:
    """The whole reply, or, once the client hangs up (a timeout, say), nothing: the engine stops.

    A stream notices a departed client at its next write. A plain reply writes once, at the end,
    so without this watch a client that timed out (and maybe retried) would keep the engine busy
    generating a reply nobody will read; the turn is logged as an abort, as a closed stream is.
    """
    reply = asyncio.ensure_future(collect)
    watch = asyncio.ensure_future(_until_disconnected(request))
    try:
        await asyncio.wait({reply, watch}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:  # the server is stopping: stop generating too
        reply.cancel()
        raise
    finally:
        watch.cancel()
    if reply.done():
        return JSONResponse(reply.result())
    reply.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await reply
    return Response(status_code=CLIENT_CLOSED)


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
    return await _collect_unless_gone(request, run.collect())
