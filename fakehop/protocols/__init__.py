"""One encoder module per protocol. Each module provides:

NAME, PATH, EXAMPLE_REQUEST; example_request(turn) -> the example as an agent sends it at that
turn; parse(body) -> ParsedRequest (raises BadRequest; the conversation checks the request
fails go into its Conversation, for the server to raise unless lenient); StreamEncoder(meta, request)
with encode(happening) -> bytes (subclass common.StreamEncoderBase, which dispatches each
happening to a method for its kind); complete(meta, request, outcome) -> dict, the non-streaming
answer; error_body(status, message, request_id, ...) -> dict; failure_response(kind,
message, request_id) -> (status, body), a `fail` in a non-streamed answer.
"""

from . import chat, messages, responses

PROTOCOLS = {module.NAME: module for module in (chat, responses, messages)}
BY_PATH = {module.PATH: module for module in PROTOCOLS.values()}
