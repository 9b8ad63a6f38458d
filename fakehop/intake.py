"""What fakehop takes from a client before it answers, and the limits on it.

A buggy client must get a clear 4xx in its protocol's error shape, never a 500 or a dropped
connection: the body is read as a JSON object whatever its Content-Type, and what json.loads
lets through but fakehop could not carry on (nesting deep enough to overflow the stack when
the journal copies the body, strings with unpaired surrogates that no answer can encode) is
refused here.
"""

from __future__ import annotations

import asyncio
import difflib
import json
import logging
import re
import zlib

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from .protocols.common import FRESH, BadRequest, dumps
from .render import seeded_request_id
from .sessions import SCENARIO_HEADER, SESSION_HEADER

MAX_BODY_BYTES = 32 * 1024 * 1024
MAX_JSON_DEPTH = 128  # arrays and objects inside each other; real requests stay far below
MAX_HEADER_BYTES = 64 * 1024  # one header line, and the request line; aiohttp's own default is 8190
MAX_MODEL_CHARS = 256  # real model names are far shorter; each streamed event repeats the model
# A body over this size is decoded and parsed in separate turns of the loop (each takes tens
# of milliseconds near the limit), so that other clients are answered in between.
LARGE_BODY_BYTES = 1024 * 1024
INFLATED_PIECE = 1024 * 1024  # a compressed body is inflated this much at a time, the loop free between pieces
# Content-Encoding values fakehop inflates, with zlib's wbits for each (deflate: zlib's wrapper or raw, found by its first byte).
INFLATED = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
SEED_HEADER = "X-Fakehop-Seed"
# The request headers of fakehop's own that it reads; any other X-Fakehop-* header is a mistake, refused.
FAKEHOP_HEADERS = (SCENARIO_HEADER, SEED_HEADER, SESSION_HEADER)
_OWN_PREFIX = "x-fakehop-"
_KNOWN_NAMES = frozenset(name.lower() for name in FAKEHOP_HEADERS)
MAX_FINE_NAMES = 4096  # header names kept as fine (see unknown_fakehop_header)
_FINE_NAMES: set[str] = set()
_SEED = re.compile(r"^\s*-?\d{1,20}\s*$")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


async def read_json_object(request: web.Request) -> tuple[bytes, dict]:
    """The request body as read and as a JSON object, or BadRequest saying what is wrong with it."""
    raw = await read_body(request, request.client_max_size)
    if not raw.strip():
        raise BadRequest("The request body is empty; send a JSON object.")
    large = len(raw) > LARGE_BODY_BYTES
    if large:
        await asyncio.sleep(0)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(f"The request body is not valid UTF-8 (byte {exc.start}); send a JSON object in UTF-8.") from None
    if large:
        await asyncio.sleep(0)
    try:
        body = parsed_json(text)
        if large:
            await asyncio.sleep(0)
        check_fit(text, body)
    except UnfitJson as exc:
        raise BadRequest(f"We could not use the JSON body of your request: {exc}.") from None
    except ValueError:
        raise BadRequest("We could not parse the JSON body of your request. The body must be a JSON object"
                         f"{content_type_hint(request)}.") from None
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.")
    return raw, body


def too_large(limit: int) -> BadRequest:
    return BadRequest(f"Request body is larger than the limit of {limit:,} bytes.", status=413)


async def read_body(request: web.Request, limit: int) -> bytes:
    """The body, inflated when its Content-Encoding says so; BadRequest (413) past `limit`
    bytes, inflated or not, (400) for a body that does not inflate, (415) for an encoding
    fakehop does not take. The server leaves bodies compressed (`auto_decompress` off), so
    that a small compressed body cannot grow past the limit before anyone counts it."""
    if request.content_length is not None and request.content_length > limit:
        raise too_large(limit)
    encoding = request.headers.get("Content-Encoding")
    if encoding is None or encoding.strip().lower() == "identity":
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise too_large(limit) from None
        if len(raw) > limit:  # a chunked body, under the server's limit but over this one
            raise too_large(limit)
        return raw
    wbits = INFLATED.get(encoding.strip().lower())
    if wbits is None:
        raise BadRequest(f"Content-Encoding {encoding[:40]!r} is not supported: send the body uncompressed, or as gzip or deflate.", status=415)
    return await inflated(request, encoding.strip().lower(), wbits, limit)


async def inflated(request: web.Request, encoding: str, wbits: int, limit: int) -> bytes:
    """The body inflated piece by piece, refused as soon as it passes `limit`."""
    pieces: list[bytes] = []
    size = 0
    inflater = None
    async for chunk in request.content.iter_any():
        if inflater is None:  # deflate without zlib's wrapper: the first byte is not a zlib header
            inflater = zlib.decompressobj(wbits if encoding != "deflate" or chunk[0] & 0x0F == 8 else -zlib.MAX_WBITS)
        while chunk:
            try:
                piece = inflater.decompress(chunk, INFLATED_PIECE)
            except zlib.error:
                raise BadRequest(f"The request body is not valid {encoding} data, as its Content-Encoding says it is.") from None
            size += len(piece)
            if size > limit:
                raise too_large(limit)
            pieces.append(piece)
            chunk = inflater.unconsumed_tail
            await asyncio.sleep(0)
    if inflater is None or not inflater.eof or inflater.unused_data:
        raise BadRequest(f"The request body is not valid {encoding} data: it is cut short or has bytes after its end.")
    return b"".join(pieces)


class UnfitJson(ValueError):
    """Valid JSON that fakehop could not carry on with."""


def refuse_constant(name: str):
    raise UnfitJson(f"it holds {name}, which JSON does not allow")


_DECODER = json.JSONDecoder(parse_constant=refuse_constant)  # built once: json.loads with options builds one per call


def loads(text: str):
    """json.loads, refusing with UnfitJson what fakehop could not carry on with: nesting deeper
    than MAX_JSON_DEPTH, strings with unpaired surrogates, which no answer can encode, and
    NaN and Infinity, which the real APIs refuse and no journal reader could parse."""
    value = parsed_json(text)
    check_fit(text, value)
    return value


def parsed_json(text: str):
    """The JSON value of `text` (ValueError if it is not JSON), NaN and Infinity refused."""
    try:
        return _DECODER.decode(text)
    except RecursionError:
        raise UnfitJson(f"it is nested more than {MAX_JSON_DEPTH} levels deep") from None


def check_fit(text: str, value) -> None:
    """UnfitJson for nesting deeper than MAX_JSON_DEPTH or an unpaired surrogate in `value`, parsed from `text`."""
    if isinstance(value, (dict, list)) and could_nest_deeper(text) and nested_deeper_than(value, MAX_JSON_DEPTH):
        raise UnfitJson(f"it is nested more than {MAX_JSON_DEPTH} levels deep")
    if "\\" in text and _SURROGATE_ESCAPE.search(text) and not encodable(value):  # a text with no backslash is found at once
        raise UnfitJson(r"it holds a \u escape of an unpaired UTF-16 surrogate, which is not text")


def could_nest_deeper(text: str) -> bool:
    """False when the text has too few brackets to nest past MAX_JSON_DEPTH: most bodies, found fast."""
    return text.count("[") + text.count("{") > MAX_JSON_DEPTH


def nested_deeper_than(value: dict | list, limit: int) -> bool:
    """Whether arrays and objects nest more than `limit` levels, found without recursion."""
    stack = [(value, 1)]
    while stack:
        container, depth = stack.pop()
        if depth > limit:
            return True
        children = container.values() if isinstance(container, dict) else container
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def content_type_hint(request: web.Request) -> str:
    """A note on the Content-Type, when a body that is not JSON came with one that says so."""
    content_type = request.headers.get("Content-Type", "")
    if not content_type or "json" in content_type:
        return ""
    return f" (fakehop reads every body as JSON; this one came as {content_type.split(';')[0].strip()})"


def encodable(value) -> bool:
    r"""Whether every string in `value` is UTF-8: `\ud800` without its pair is valid JSON, but not text."""
    try:
        dumps(value).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def bearer_token(header: str) -> str | None:
    """The token of an `Authorization: Bearer TOKEN` header (the scheme in any case), else None."""
    scheme, _, token = header.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


def parse_seed(text: str) -> int:
    """The value of X-Fakehop-Seed: a whole number, as `fakehop play --seed` takes."""
    if not _SEED.match(text):
        raise ValueError(text)
    return int(text)


def new_request_id() -> str:
    return "req_" + FRESH.randbytes(12).hex()


def request_id_for(request: web.Request) -> str:
    """A fresh id, or with X-Fakehop-Seed the one `fakehop play --seed` writes."""
    seed = request.headers.get(SEED_HEADER)
    if seed is not None:  # most requests send none: no exception is raised and caught for them
        try:
            return seeded_request_id(parse_seed(seed))
        except ValueError:
            pass  # seed_of refuses the request, naming the header
    return new_request_id()


def stamp_request_id(response: web.StreamResponse, request_id: str) -> None:
    """The request id in the headers both SDKs read it from, for answers that belong to no protocol."""
    response.headers["x-request-id"] = request_id
    response.headers["request-id"] = request_id


def unknown_fakehop_header(headers) -> str | None:
    """The first X-Fakehop-* header in `headers` (a request's) that fakehop does not read, such
    as a misspelled one, which would otherwise be ignored; None when there is none.

    This runs for every request. A client sends the same header names request after request,
    so the names found fine are kept, and a request whose names all were is passed with one
    set look-up a name, in C (`keys() <= set`); only a request with a name not seen before has
    its names looked at one by one."""
    if headers.keys() <= _FINE_NAMES:
        return None
    for name in headers:
        lowered = name.lower()
        if lowered.startswith(_OWN_PREFIX) and lowered not in _KNOWN_NAMES:
            return name
    if len(_FINE_NAMES) >= MAX_FINE_NAMES:  # many names, made up: start over with the ones in use
        _FINE_NAMES.clear()
    _FINE_NAMES.update(headers)
    return None


def unknown_header_message(name: str) -> str:
    close = difflib.get_close_matches(name.title(), FAKEHOP_HEADERS, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else ""
    return (f"Unknown header {name[:80]}: fakehop reads only {', '.join(FAKEHOP_HEADERS[:-1])} and {FAKEHOP_HEADERS[-1]}, "
            f"and refuses every other X-Fakehop-* header{hint}")


def seed_of(request: web.Request) -> int | None:
    """The request's seed, None without the header; BadRequest naming the header when it is not a number."""
    text = request.headers.get(SEED_HEADER)
    if text is None:
        return None
    try:
        return parse_seed(text)
    except ValueError:
        raise BadRequest(f"Invalid {SEED_HEADER} header: expected a whole number such as 0, got {text[:40]!r}.", param=SEED_HEADER) from None


class ParserErrorsAsWarnings(logging.Filter):
    """aiohttp logs a request it cannot parse (a header over the limit, bytes that are not HTTP)
    with a traceback at ERROR, after answering it with a 400 itself. That is the client's fault,
    not the server's: one line at WARNING says so."""

    def filter(self, record: logging.LogRecord) -> bool:
        problem = record.exc_info[1] if record.exc_info else None
        if isinstance(problem, HttpProcessingError):
            peer = record.args[0] if isinstance(record.args, tuple) and record.args else "a client"
            record.levelno, record.levelname = logging.WARNING, logging.getLevelName(logging.WARNING)
            record.msg, record.args = "refused a request from %s that is not valid HTTP (%s %s)", (peer, problem.code, " ".join(problem.message.split()))
            record.exc_info = record.exc_text = None
        return True


PARSER_ERRORS_AS_WARNINGS = ParserErrorsAsWarnings()
