"""The protocol routes that play no scenario: the models a server knows (`GET /v1/models`, and
one of them by its id), and the input tokens a request would count (Messages'
`POST /v1/messages/count_tokens`, Responses' `POST /v1/responses/input_tokens`), each in its
protocol's shape. A count is fakehop's estimate, which an answer's usage gives too unless its
scenario sets its own. None of these is in the journal: they ask the server, no scenario answers them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from ..protocols import PROTOCOLS
from ..protocols.common import BadRequest, ParsedRequest
from ..scenario.library import Library
from ..state.sessions import SESSION_HEADER, BadSessionName, Session
from .gateway import DEFAULT_MODELS, error_response, is_anthropic_client, refusal, stamp_answer
from .intake import LARGE_BODY_BYTES, in_body_thread, json_body, read_body, request_id_for
from .origins import HOSTS_KEY
from .shared import GATEWAY_KEY, MODELS_PATH

__all__ = ["COUNT_TOKENS_PATH", "INPUT_TOKENS_PATH", "MODEL_PATH", "count_tokens", "list_models", "one_model"]

MODEL_PATH = MODELS_PATH + "/{model_id}"
COUNT_TOKENS_PATH = "/v1/messages/count_tokens"
INPUT_TOKENS_PATH = "/v1/responses/input_tokens"
MODEL_CREATED = 1767225600  # 2026-01-01, when every model fakehop knows was made
MODEL_CREATED_AT = "2026-01-01T00:00:00Z"


def known_models(library: Library) -> list[str]:
    models = set(DEFAULT_MODELS)
    for scenario in library.scenarios.values():
        models.update(entry.script.model for entry in scenario.entries if entry.script and entry.script.model)
    return sorted(models)


def session_asking(request: web.Request) -> Session:
    """The session of a request to a side route, once it may be answered (BadRequest when not)."""
    gateway = request.app[GATEWAY_KEY]
    refused = refusal(request, request.app[HOSTS_KEY], gateway.api_key)
    if refused is not None:
        raise refused
    try:
        return gateway.session_for(request.headers)
    except BadSessionName as exc:
        raise BadRequest(str(exc), param=SESSION_HEADER) from None


async def answered(request: web.Request, protocol, answer: Callable[[], Awaitable[web.Response]]) -> web.Response:
    """`answer()`, or its refusal in `protocol`'s error shape, stamped with a request id."""
    request_id = request_id_for(request, protocol.fresh_request_id)
    try:
        response = await answer()
    except BadRequest as refused:
        response = error_response(
            protocol, refused.status, refused.message, request_id, param=refused.param, code=refused.code
        )
    stamp_answer(response, request_id, protocol)
    return response


def models_protocol(request: web.Request):
    """The protocol whose shapes answer a request for the models: Anthropic's for a client that
    sends its headers (`anthropic-version`, `x-api-key`), else OpenAI's."""
    return PROTOCOLS["messages" if is_anthropic_client(request) else "chat"]


async def list_models(request: web.Request) -> web.Response:
    protocol = models_protocol(request)

    async def listed() -> web.Response:
        models = known_models(session_asking(request).library)
        if protocol.NAME == "messages":
            data = [model_object(model, True) for model in models]
            first, last = (models[0], models[-1]) if models else (None, None)
            return web.json_response({"data": data, "has_more": False, "first_id": first, "last_id": last})
        return web.json_response({"object": "list", "data": [model_object(model, False) for model in models]})

    return await answered(request, protocol, listed)


async def one_model(request: web.Request) -> web.Response:
    """`GET /v1/models/{id}`: a model the server knows, or the API's 404."""
    protocol, model = models_protocol(request), request.match_info["model_id"]

    async def found() -> web.Response:
        if model not in known_models(session_asking(request).library):
            if protocol.NAME == "messages":
                raise BadRequest(f"model: {model}", status=404)
            raise BadRequest(
                f"The model '{model}' does not exist or you do not have access to it.",
                status=404,
                code="model_not_found",
            )
        return web.json_response(model_object(model, protocol.NAME == "messages"))

    return await answered(request, protocol, found)


def model_object(model: str, anthropic: bool) -> dict:
    if anthropic:
        return {"type": "model", "id": model, "display_name": model, "created_at": MODEL_CREATED_AT}
    return {"id": model, "object": "model", "created": MODEL_CREATED, "owned_by": "fakehop"}


def count_tokens(protocol_name: str) -> Callable:
    """The handler of a protocol's count of input tokens: the request as its create would send
    it (without what it needs only to be answered), counted as an answer counts it."""
    protocol = PROTOCOLS[protocol_name]

    async def handle(request: web.Request) -> web.Response:
        async def count() -> web.Response:
            gateway = request.app[GATEWAY_KEY]
            session_asking(request)
            raw = await read_body(request, request.client_max_size, gateway.bodies)
            try:  # a large body is read in the body thread, as an answer's is
                large = len(raw) > LARGE_BODY_BYTES
                body = await in_body_thread(json_body, request, raw) if large else json_body(request, raw)
                lenient = gateway.lenient_conversations
                return web.json_response(
                    await in_body_thread(counted, protocol, body, lenient)
                    if large
                    else counted(protocol, body, lenient)
                )
            finally:
                gateway.bodies.held -= len(raw)

        return await answered(request, protocol, count)

    return handle


def counted(protocol, body: dict, lenient: bool) -> dict:
    asked = {key: value for key, value in body.items() if key not in ("thread", "stream", "background")}
    if protocol.NAME == "messages":
        asked.setdefault("max_tokens", 1)  # a count takes none
    else:
        asked.setdefault("model", DEFAULT_MODELS[0])  # and Responses' need not name a model
    parsed: ParsedRequest = protocol.parse(asked)
    problem = parsed.conversation.problem
    if problem is not None and not lenient:
        raise problem
    if protocol.NAME == "messages":
        return {"input_tokens": parsed.play.input_tokens}
    return {"object": "response.input_tokens", "input_tokens": parsed.play.input_tokens}
