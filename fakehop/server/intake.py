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
import math
import re
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar, cast

import orjson
from aiohttp import hdrs, web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.streams import StreamReader
from multidict import istr

from ..protocols.common import BadRequest, openai_request_id
from ..state.faults import FAULT_HEADER
from ..state.sessions import SCENARIO_HEADER, SESSION_HEADER
from .jsonshape import Shape, shape_of
from .render import seeded_request_id

MAX_BODY_BYTES = 32 * 1024 * 1024
MAX_JSON_DEPTH = 128  # arrays and objects inside each other; real requests stay far below
# Python's parser takes about a tenth of a microsecond a value, holding the interpreter all
# the while, and a parsed value takes tens of bytes: this many keep a parse within some 25 ms
# and 25 MB. Real requests hold far fewer, even long conversations of tool calls.
MAX_JSON_VALUES = 250_000
# And a string costs it a few nanoseconds a backslash escape in it: a body of millions of
# escapes would hold it for a tenth of a second. Real bodies, code and prose, hold far fewer.
MAX_BACKSLASHES = 4_000_000
TOO_DEEP = f"it is nested more than {MAX_JSON_DEPTH} levels deep"
# The fewest bytes of JSON nested too deep, a bracket into each level and one out: a shorter body
# parses as nested deep enough or not at all, and holds too few values and backslashes to count.
SHORTEST_TOO_DEEP = 2 * (MAX_JSON_DEPTH + 1)
MAX_HEADER_BYTES = 64 * 1024  # one header line, and the request line; aiohttp's own default is 8190
MAX_MODEL_CHARS = 256  # real model names are far shorter; each streamed event repeats the model
# A body over this size is checked, decoded and parsed in a thread (and read by its protocol
# there too), so that other clients are answered meanwhile: a conversation of this size can
# hold 9,000 turns, which a protocol takes some 20 ms to read.
LARGE_BODY_BYTES = 256 * 1024
# Request bodies the protocol routes hold at once: room for the largest with more beside it.
# A body is held as read, as text while it is parsed, and parsed (strings about their bytes
# again): about three times its bytes at the most.
HELD_BODY_BYTES = 48 * 1024 * 1024
INFLATED_PIECE = 1024 * 1024  # a compressed body is inflated this much at a time, the loop free between pieces
_BODY_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fakehop-bodies")  # see in_body_thread
T = TypeVar("T")
# Content-Encoding values fakehop inflates, with zlib's wbits for each (deflate: zlib's wrapper or raw, found by its first byte).
INFLATED = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
SEED_HEADER = "X-Fakehop-Seed"
SEED_KEY = istr(SEED_HEADER)  # looked up for every request: see sessions.SESSION_HEADER_KEY
# The request headers of fakehop's own that it reads; any other X-Fakehop-* header is a mistake, refused.
FAKEHOP_HEADERS = (FAULT_HEADER, SCENARIO_HEADER, SEED_HEADER, SESSION_HEADER)
_OWN_PREFIX = "x-fakehop-"
_KNOWN_NAMES = frozenset(name.lower() for name in FAKEHOP_HEADERS)
MAX_FINE_NAMES = 4096  # header names kept as fine (see unknown_fakehop_header)
_FINE_NAMES: set[str] = set()
_SEED = re.compile(r"^\s*-?\d{1,20}\s*$")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_PAIR = re.compile(r"\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}")
# Whether aiohttp's StreamReader has the attributes of its own that whole_body reads a body from
# (its chunks, its low water mark, its error); read_nowait reads every body where it has not.
TAKES_CHUNKS = all(hasattr(StreamReader, name) for name in ("_buffer", "_low_water", "_exception"))
LONG_DIGIT_RUN = 19  # the fewest digits of an integer outside [-2**63, 2**64 - 1], which orjson reads as a float
_DIGITS_AS_ZEROS = bytes(b"0"[0] if byte in b"0123456789" else b" "[0] for byte in range(256))
_ZEROS_RUN = b"0" * LONG_DIGIT_RUN


class HeldBodies:
    """The bytes of request bodies the protocol routes hold at once, each from the moment it
    is read (by its Content-Length, before) until its answer ends: one that would take them
    past `limit` is refused with a 429 in the protocol's shape (the SDKs retry it), so that
    clients sending large bodies together cannot take more memory than that. `held` is
    changed in place by whoever holds (read_body) and lets go (the server, as an answer ends):
    two additions a request."""

    def __init__(self, limit: int = HELD_BODY_BYTES):
        self.limit = limit
        self.held = 0

    def hold(self, size: int) -> None:
        if self.held + size > self.limit:
            raise BadRequest(
                f"fakehop holds at most {self.limit:,} bytes of request bodies at once, and the answers under way "
                f"hold {self.held:,}; this body of {size:,} bytes would pass that: retry once they are answered.",
                status=429,
                headers={"Retry-After": "1"},
            )
        self.held += size


def json_body(request: web.Request, raw: bytes) -> dict:
    """The body `raw` of `request` as a JSON object, or BadRequest saying what is wrong with it.
    A body over LARGE_BODY_BYTES is for in_body_thread."""
    try:
        body = body_json(raw)
    except UnicodeDecodeError as exc:
        raise BadRequest(
            f"The request body is not valid UTF-8 (byte {exc.start}); send a JSON object in UTF-8."
        ) from None
    except UnfitJson as exc:
        raise refusal(exc) from None
    except ValueError:
        raise not_json(request, raw) from None
    if type(body) is not dict:  # both parsers make plain dicts
        raise BadRequest("The request body must be a JSON object.")
    return body


def not_json(request: web.Request, raw: bytes) -> BadRequest:
    """Why `raw`, the body of `request`, is refused when it is not JSON at all."""
    if not raw.strip():
        return BadRequest("The request body is empty; send a JSON object.")
    return BadRequest(
        f"We could not parse the JSON body of your request. The body must be a JSON object{content_type_hint(request)}."
    )


async def in_body_thread(work: Callable[..., T], *args) -> T:
    """`work(*args)` in the one thread that works on large bodies. Parsing one holds the
    interpreter for up to tens of milliseconds at a time, whatever thread it runs in; two
    parsed at once in two threads could keep the loop waiting for both."""
    return await asyncio.get_running_loop().run_in_executor(_BODY_THREAD, work, *args)


def refusal(exc: UnfitJson) -> BadRequest:
    if isinstance(exc, TooManyValues):
        return BadRequest(
            f"The request body is too large to read: {exc}, and fakehop reads at most that many.", status=413
        )
    return BadRequest(f"We could not use the JSON body of your request: {exc}.")


def check_shape(raw: bytes) -> None:
    """BadRequest, as json_body refuses it, for a body of too many values or nested too deep,
    found without parsing it (see checked_shape): a body that is not JSON passes, for whoever
    parses it to refuse it, with no fear that the parse overflows the stack."""
    try:
        shape = checked_shape(raw)
        if shape is not None and shape.depth > MAX_JSON_DEPTH:
            raise UnfitJson(TOO_DEEP)
    except UnfitJson as exc:
        raise refusal(exc) from None


def too_large(limit: int) -> BadRequest:
    return BadRequest(f"Request body is larger than the limit of {limit:,} bytes.", status=413)


def whole_body(request: web.Request, held: HeldBodies) -> bytes | None:
    """The body, held in `held`, when it has come in whole, uncompressed and no longer than
    LARGE_BODY_BYTES (or the limit) by its Content-Length, as most bodies do; None for
    read_body to read it. Taken from the payload at once, it costs some 3,000 instructions
    fewer than `request.read()`, which waits for its end and copies it twice.

    A body of one chunk below the payload's low water mark (most bodies) is taken from its
    chunks (see TAKES_CHUNKS): `read_nowait` costs 7,000 instructions more, most of them asking
    the protocol to resume reading, which a body that small did not pause (one past the high
    water mark did: it goes by read_nowait, which resumes reading). An empty body's payload is
    aiohttp's EmptyStreamReader, which has no chunks."""
    content, headers = request.content, request.headers
    if not content.is_eof() or hdrs.CONTENT_ENCODING in headers:
        return None
    length = headers.get(hdrs.CONTENT_LENGTH)  # request.content_length, without its call
    if length is None:
        return None
    size = int(length)
    if size > LARGE_BODY_BYTES or size > request.client_max_size:
        return None
    if TAKES_CHUNKS and 0 < size < content._low_water and content._exception is None and len(content._buffer) == 1:
        raw = content._buffer.popleft()
    else:
        raw = content.read_nowait()
    held.hold(len(raw))
    return raw


async def read_body(request: web.Request, limit: int, held: HeldBodies | None = None) -> bytes:
    """The body, inflated when its Content-Encoding says so; BadRequest (413) past `limit`
    bytes, inflated or not, (400) for a body that does not inflate, (415) for an encoding
    fakehop does not take. With `held`, the body's bytes are held there (see HeldBodies) once
    this returns, and none when it raises: by its Content-Length before it is read, else as it
    comes. The server leaves bodies compressed (`auto_decompress` off), so that a small
    compressed body cannot grow past the limit before anyone counts it."""
    length = request.content_length
    if length is not None and length > limit:
        raise too_large(limit)
    encoding = request.headers.get(hdrs.CONTENT_ENCODING)
    if encoding is not None and encoding.strip().lower() != "identity":
        return await inflated(request, encoding.strip().lower(), limit, held)
    holding = length if held is not None and length is not None else 0
    if holding:
        cast(HeldBodies, held).hold(holding)
    try:
        raw = (
            await request.read()
            if length is not None and length <= LARGE_BODY_BYTES
            else await read_in_pieces(request, limit)
        )
    except BaseException as exc:
        if holding:
            cast(HeldBodies, held).held -= holding
        if isinstance(exc, web.HTTPRequestEntityTooLarge):
            raise too_large(limit) from None
        raise
    if held is not None and length is None:  # chunked: held once read
        held.hold(len(raw))
    return raw


async def read_in_pieces(request: web.Request, limit: int) -> bytes:
    """A large or chunked body, taken as it comes and joined in the bodies' thread when it is
    large: `request.read()` copies a body twice on the loop, some tens of milliseconds for the
    largest, while other clients wait."""
    pieces: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_any():
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        pieces.append(chunk)
    return await joined(pieces, size)


async def joined(pieces: list[bytes], size: int) -> bytes:
    """`pieces` as one, joined in the bodies' thread when they come to more than LARGE_BODY_BYTES."""
    return await in_body_thread(b"".join, pieces) if size > LARGE_BODY_BYTES else b"".join(pieces)


async def inflated(request: web.Request, encoding: str, limit: int, held: HeldBodies | None) -> bytes:
    """The body inflated piece by piece, each piece held in `held` (let go again if this
    raises), refused as soon as it passes `limit`; (415) for an encoding fakehop does not take."""
    wbits = INFLATED.get(encoding)
    if wbits is None:
        raise BadRequest(
            f"Content-Encoding {encoding[:40]!r} is not supported: send the body uncompressed, or as gzip or deflate.",
            status=415,
        )
    pieces: list[bytes] = []
    try:
        return await inflate_into(pieces, request, encoding, wbits, limit, held)
    except BaseException:
        if held is not None:
            held.held -= sum(map(len, pieces))
        raise


async def inflate_into(
    pieces: list[bytes], request: web.Request, encoding: str, wbits: int, limit: int, held: HeldBodies | None
) -> bytes:
    """The body inflated, each piece held in `held` and kept in `pieces` as it comes."""
    size = 0
    inflater = None
    async for chunk in request.content.iter_any():
        if inflater is None:  # deflate without zlib's wrapper: the first byte is not a zlib header
            inflater = zlib.decompressobj(wbits if encoding != "deflate" or chunk[0] & 0x0F == 8 else -zlib.MAX_WBITS)
        while chunk:
            try:
                piece = inflater.decompress(chunk, INFLATED_PIECE)
            except zlib.error:
                raise BadRequest(
                    f"The request body is not valid {encoding} data, as its Content-Encoding says it is."
                ) from None
            size += len(piece)
            if size > limit:
                raise too_large(limit)
            if held is not None:
                held.hold(len(piece))
            pieces.append(piece)
            chunk = inflater.unconsumed_tail
            await asyncio.sleep(0)
    if inflater is None or not inflater.eof or inflater.unused_data:
        raise BadRequest(f"The request body is not valid {encoding} data: it is cut short or has bytes after its end.")
    return await joined(pieces, size)


class UnfitJson(ValueError):
    """Valid JSON that fakehop could not carry on with."""


class TooManyValues(UnfitJson):
    """JSON of more values or escapes than a parse may take at once (MAX_JSON_VALUES, MAX_BACKSLASHES)."""


def refuse_constant(name: str):
    raise UnfitJson(f"it holds {name}, which JSON does not allow")


def finite_float(text: str) -> float:
    """The number `text`, refused when it is past the largest float: json would make it infinity,
    which no JSON reader of the journal could parse back."""
    value = float(text)
    if value in INFINITIES:
        raise UnfitJson(f"it holds the number {text[:40]}, too large to be read as a number")
    return value


INFINITIES = (math.inf, -math.inf)
# Built once: json.loads with options builds one per call. Only bodies orjson does not read
# come here (see body_json), so the float hook costs the usual request nothing.
_DECODER = json.JSONDecoder(parse_constant=refuse_constant, parse_float=finite_float)
_JSON_SPACE = " \t\n\r"


def loads(text: str):
    """json.loads, refusing with UnfitJson what fakehop could not carry on with (see checked_json)."""
    return checked_json(text.encode("utf-8", "surrogatepass"), text)


def checked_json(raw: bytes, text: str):
    """The JSON value of `text` (`raw` decoded; ValueError if it is not JSON), refusing with
    UnfitJson what fakehop could not carry on with: more than MAX_JSON_VALUES values or
    MAX_BACKSLASHES backslashes (TooManyValues, before it is parsed), nesting deeper than
    MAX_JSON_DEPTH, strings with unpaired surrogates, which no answer can encode, and NaN and
    Infinity, which the real APIs refuse and no journal reader could parse. Most bodies are
    too short to hold too many values and have too few brackets to nest too deep: for them,
    two counts and the parse, and for one shorter than SHORTEST_TOO_DEEP the parse alone (two
    counts of the bench's bodies of 100-150 bytes cost some 3,000 instructions)."""
    return checked_text(text, checked_shape(raw) if len(raw) >= SHORTEST_TOO_DEEP else None)


def body_json(raw: bytes):
    """checked_json's value for the body `raw`, or its error (UnicodeDecodeError first, as when
    `raw` is decoded before checked_json), parsed by orjson where it reads `raw` as json does:
    json_body takes 11,000 instructions for the bench's body of 135 bytes, 17,000 with json
    (orjson's parse 6,500 and long_digit_run 3,000 of them). orjson refuses what json
    reads but fakehop refuses after it (unpaired surrogates, NaN and Infinity, and numbers past
    the largest float such as 1e400, which json would make infinity), or with a message of its own:
    those, and a body holding an integer that orjson would make a float (past 64 bits: one of
    19 digits or more), are read by json as ever."""
    try:
        shape = checked_shape(raw) if len(raw) >= SHORTEST_TOO_DEEP else None
    except TooManyValues:
        raw.decode("utf-8")  # a body that is not UTF-8 is refused as that first
        raise
    if not long_digit_run(raw):
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
        else:
            if shape is not None and shape.depth > MAX_JSON_DEPTH:
                raise UnfitJson(TOO_DEEP)
            return value
    return checked_text(raw.decode("utf-8"), shape)


def long_digit_run(raw: bytes) -> bool:
    """Whether `raw` holds LONG_DIGIT_RUN digits in a row, as an integer that orjson reads as a
    float does: its digits made zeros and all else spaces, then the run of zeros looked for, two
    loops in C (some 3,000 instructions for the bench's body of 135 bytes, where a regex search
    takes 21,000; `partition`, since `in` first tries the run as an index and clears the
    TypeError: 1,500 more)."""
    return bool(raw.translate(_DIGITS_AS_ZEROS).partition(_ZEROS_RUN)[1])


def checked_text(text: str, shape: Shape | None):
    """checked_json's value for `text`, of shape `shape` (see checked_shape)."""
    try:
        value = decoded(text)
    except RecursionError:
        raise UnfitJson(TOO_DEEP) from None
    if shape is not None and shape.depth > MAX_JSON_DEPTH:
        raise UnfitJson(TOO_DEEP)
    if (
        "\\" in text and _SURROGATE_ESCAPE.search(text) and unpaired_surrogate(text)
    ):  # a text with no backslash is found at once
        raise UnfitJson(r"it holds a \u escape of an unpaired UTF-16 surrogate, which is not text")
    return value


def decoded(text: str):
    """_DECODER.decode(text), without its two whitespace matches around a text that does not
    start with whitespace (most bodies): those cost a third as much as the parse."""
    if not text or text[0] in _JSON_SPACE:  # "" too: decode refuses it
        return _DECODER.decode(text)
    value, end = _DECODER.raw_decode(text)
    if end != len(text):
        rest = text[end:]
        if rest.strip(_JSON_SPACE):  # more than whitespace after the value: at its start, where decode says
            raise json.JSONDecodeError("Extra data", text, len(text) - len(rest.lstrip(_JSON_SPACE)))
    return value


def checked_shape(raw: bytes) -> Shape | None:
    """The shape of `raw` when it has brackets enough to nest too deep, or bytes enough for too
    many values (None when it has neither); TooManyValues when it holds more than
    MAX_JSON_VALUES values or MAX_BACKSLASHES backslashes."""
    shape = None
    if len(raw) > MAX_JSON_VALUES or raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH:
        shape = shape_of(raw, MAX_JSON_VALUES)
        if shape.values > MAX_JSON_VALUES:
            raise TooManyValues(f"it holds more than {MAX_JSON_VALUES:,} values")
    if len(raw) > MAX_BACKSLASHES and raw.count(b"\\") > MAX_BACKSLASHES:
        raise TooManyValues(f"it holds more than {MAX_BACKSLASHES:,} backslashes")
    return shape


def unpaired_surrogate(text: str) -> bool:
    r"""Whether a \u escape in `text` is a UTF-16 surrogate without its pair, which is valid
    JSON but not text: the pairs go first, then any surrogate escape left is one. Escaped
    backslashes are masked first, so that every \u left is an escape."""
    unescaped = text.replace("\\\\", "__")
    return _SURROGATE_ESCAPE.search(_SURROGATE_PAIR.sub("", unescaped)) is not None


def content_type_hint(request: web.Request) -> str:
    """A note on the Content-Type, when a body that is not JSON came with one that says so."""
    content_type = request.headers.get("Content-Type", "")
    if not content_type or "json" in content_type:
        return ""
    return f" (fakehop reads every body as JSON; this one came as {content_type.split(';')[0].strip()})"


def bearer_token(header: str) -> str | None:
    """The token of an `Authorization: Bearer TOKEN` header (the scheme in any case), else None."""
    scheme, _, token = header.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


def parse_seed(text: str) -> int:
    """The value of X-Fakehop-Seed: a whole number, as `fakehop play --seed` takes."""
    if not _SEED.match(text):
        raise ValueError(text)
    return int(text)


def request_id_for(request: web.Request, fresh: Callable[[], str] = openai_request_id) -> str:
    """A fresh id (`fresh`'s), or with X-Fakehop-Seed the one `fakehop play --seed` writes."""
    seed = request.headers.get(SEED_KEY)
    if seed is not None:  # most requests send none: no exception is raised and caught for them
        try:
            return seeded_request_id(parse_seed(seed))
        except ValueError:
            pass  # seed_of refuses the request, naming the header
    return fresh()


def stamp_request_id(response: web.StreamResponse, request_id: str) -> None:
    """The request id in the headers both SDKs read it from, for answers that belong to no protocol."""
    response.headers["x-request-id"] = request_id
    response.headers["request-id"] = request_id


def unknown_fakehop_header(headers) -> str | None:
    """The first X-Fakehop-* header in `headers` (a request's) that fakehop does not read, such
    as a misspelled one, which would otherwise be ignored; None when there is none.

    This runs for every request. A client sends the same header names request after request,
    so the names found fine are kept, and a request whose names all were is passed with one
    set look-up a name, in C (`set.issuperset`); only a request with a name not seen before has
    its names looked at one by one."""
    if _FINE_NAMES.issuperset(headers):  # some 350 instructions fewer than `headers.keys() <= _FINE_NAMES`
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
    return (
        f"Unknown header {name[:80]}: fakehop reads only {', '.join(FAKEHOP_HEADERS[:-1])} and {FAKEHOP_HEADERS[-1]}, "
        f"and refuses every other X-Fakehop-* header{hint}"
    )


def seed_of(request: web.Request) -> int | None:
    """The request's seed, None without the header; BadRequest naming the header when it is not a number."""
    text = request.headers.get(SEED_KEY)
    if text is None:
        return None
    try:
        return parse_seed(text)
    except ValueError:
        raise BadRequest(
            f"Invalid {SEED_HEADER} header: expected a whole number such as 0, got {text[:40]!r}.", param=SEED_HEADER
        ) from None


class ParserErrorsAsWarnings(logging.Filter):
    """aiohttp logs a request it cannot parse (a header over the limit, bytes that are not HTTP)
    with a traceback at ERROR, after answering it with a 400 itself. That is the client's fault,
    not the server's: one line at WARNING says so, with aiohttp's reason but not the bytes it
    quotes (the line it stopped at may be a header holding a key)."""

    def filter(self, record: logging.LogRecord) -> bool:
        problem = record.exc_info[1] if record.exc_info else None
        if isinstance(problem, HttpProcessingError):
            peer = record.args[0] if isinstance(record.args, tuple) and record.args else "a client"
            record.levelno, record.levelname = logging.WARNING, logging.getLevelName(logging.WARNING)
            reason = _QUOTED.split(" ".join(problem.message.split()), maxsplit=1)[0]
            record.msg = "refused a request from %s that is not valid HTTP (%s %s)"
            record.args = (peer, problem.code, reason)
            record.exc_info = record.exc_text = None
        return True


_QUOTED = re.compile(r":? ?b?['\"]")  # where aiohttp's reason for refusing a request starts quoting it
PARSER_ERRORS_AS_WARNINGS = ParserErrorsAsWarnings()
