"""One encoder module per protocol. Each module provides:

NAME, PATH, EXAMPLE_REQUEST; example_request(turn) -> the example as an agent sends it at that
turn; parse(body) -> ParsedRequest (raises BadRequest; the conversation checks the request
fails go into its Conversation, for the server to raise unless lenient); StreamEncoder(meta, request)
with encode(happening) -> bytes (subclass common.StreamEncoderBase, which dispatches each
happening to a method for its kind); complete(meta, request, outcome) -> dict, the non-streaming
answer; error_body(status, message, request_id, param=, code=, error_type=) -> dict;
failure_response(failure, request_id) -> (status, body), a `fail` in a non-streamed answer;
error_headers(status) -> ((name, value), ...), the headers of the protocol's error answers;
HTTP_MESSAGES, an error answer's default message by status;
REQUEST_ID_HEADER, the header its SDK reads an answer's request id from; fresh_request_id() -> a new
request id in the form its real API writes.
"""

from . import chat, messages, responses

PROTOCOLS = {module.NAME: module for module in (chat, responses, messages)}
BY_PATH = {module.PATH: module for module in PROTOCOLS.values()}
