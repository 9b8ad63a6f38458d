"""GET /_fakehop/metrics: what the server answered, in the Prometheus text format.

The counting is a journal listener that keeps each record as it opens, and counts the ones
that have closed a batch at a time (see Counts); the Prometheus families are built from those
counts only when the endpoint is read, by a custom collector, so an answer costs one append
and no call into prometheus_client. Every counter counts from the server's start: neither
reset nor DELETE /requests takes it back. With --state, each server publishes its counts to
Redis, and each reads every server's, summed.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from functools import partial
from itertools import compress, groupby, repeat
from operator import attrgetter, eq, not_
from typing import TYPE_CHECKING, cast

from aiohttp import web

from ..state.journal import IN_PROGRESS, Journal, Record
from ..state.redisstate import StateDown
from .control import control_call
from .shared import GATEWAY_KEY

if TYPE_CHECKING:
    from ..state.redisstate import RedisState

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
MAX_SERIES = 1000  # label sets counted apart; past that, a new scenario is counted as OTHER
OTHER = "other"
PUBLISH_INTERVAL = 2.0  # seconds between a server's publishings of its counts, with --state
NONE = "none"  # the label of a value a record does not have: no protocol, scenario or status
FOLD_BATCH = 256  # records folded at once (fewer for a smaller journal): few enough that waiting ones hold little
OVERFLOW_BATCH = 4  # records opened between folds while the journal is over its bytes: 5 MiB held past it at most


class Stream:
    """What the streams of one protocol add up to."""

    __slots__ = ("bytes", "duration_sum", "durations", "events", "keepalives")

    def __init__(self) -> None:
        self.bytes = self.events = self.keepalives = 0
        self.durations = [0] * (len(DURATION_BUCKETS) + 1)  # streams per bucket, not cumulative; the last is +Inf
        self.duration_sum = 0.0


class Counts:
    """The counts of every record opened since counting began: requests per (protocol,
    scenario, end, status), and what the streams of each protocol sent, for those that have
    closed; the rest are kept, `open`, to be counted once they have.

    Answering a request costs one append (`add`, a journal listener for records opening): the
    kept records are looked over `batch` openings at a time (see count_for), and whenever the
    metrics are read, with the work per record done in C (attrgetter, Counter, sorted, sum,
    compress), not in Python. Keeping the records themselves, not their seqs, the gauges stay
    right when the journal drops a record under way (reset, or more requests than it keeps).
    """

    def __init__(self, batch: int = FOLD_BATCH) -> None:
        self.batch = batch  # openings between folds
        self.requests: Counter[tuple] = Counter()  # by (protocol, scenario, end, status)
        self.streams: dict[str | None, Stream] = {}  # by protocol
        self.open: list[Record] = []  # the records under way at the last fold, then every one opened since
        self.fold_at = batch  # the length of `open` at which the next fold comes

    def add(self, record: Record) -> None:
        """A journal listener: one record opening, counted once it has closed."""
        kept = self.open
        kept.append(record)
        if len(kept) >= self.fold_at:
            self.fold()

    def overflowed(self) -> None:
        """A journal listener: records went to keep the journal within its bytes. The kept ones
        it let go are let go here too once OVERFLOW_BATCH records have opened since the last
        fold: a journal full of long answers goes over at every request, and a fold at each
        cost some 50k instructions a request (chat with 200 deltas, callgrind: 435.2k; 404.6k
        folding every 4, 397.8k every 16, at up to four times the memory held past the bound)."""
        if len(self.open) >= self.fold_at - self.batch + OVERFLOW_BATCH:
            self.fold()

    def fold(self) -> None:
        """Count the kept records that have closed, and keep the rest."""
        records = self.open
        under_way = list(map(eq, map(END, records), repeat(IN_PROGRESS)))
        self.open = list(compress(records, under_way))
        self.fold_at = len(self.open) + self.batch
        closed = list(compress(records, map(not_, under_way)))
        # Records alike in all that is counted but their durations are counted together:
        # answers to the same requests mostly are. A record costs one look-up, in C.
        alike = Counter(map(COUNTED, closed))
        for (protocol, scenario, end, status, sent_bytes, events, keepalives, _), count in alike.items():
            self.requests[protocol, scenario, end, status] += count
            stream = self.stream_of(protocol)
            stream.bytes += sent_bytes * count
            stream.events += events * count
            stream.keepalives += keepalives * count
        if len(self.requests) > MAX_SERIES:
            self.lump_scenarios()
        streamed = [(key[7], key[3]) == STREAMED_200 for key in alike]
        if all(streamed):  # most batches: no need to look at each record again
            answered = closed
        elif any(streamed):
            answered = list(compress(closed, map(eq, map(STREAM_STATUS, closed), repeat(STREAMED_200))))
        else:
            return
        protocols = {key[0] for key in alike}
        if len(protocols) == 1:  # most batches: no need to sort the records by protocol
            self.add_durations(self.stream_of(protocols.pop()), answered)
        else:
            for _, group in groupby(sorted(answered, key=PATH), key=PATH):  # a path's records are one protocol's
                same = list(group)
                self.add_durations(self.stream_of(same[0].protocol), same)

    def stream_of(self, protocol: str | None) -> Stream:
        stream = self.streams.get(protocol)
        if stream is None:
            stream = self.streams[protocol] = Stream()
        return stream

    @staticmethod
    def add_durations(stream: Stream, records: list[Record]) -> None:
        """The durations of the streams of `records` in `stream`'s histogram: each one's bucket
        found and counted in C, so that Python goes over the buckets they fall in (mostly one
        or two: like answers take like times), not over all 16 (a fold of 4 records took 65
        lines of Python so)."""
        durations = list(map(DURATION, records))
        stream.duration_sum += sum(durations)
        for bucket, count in Counter(map(BUCKET_OF, durations)).items():
            stream.durations[bucket] += count

    def lump_scenarios(self) -> None:
        """Past MAX_SERIES label sets (scenarios added by calls have no bound), the newest
        scenarios' counts go under OTHER."""
        for key in list(self.requests)[MAX_SERIES:]:
            protocol, _, end, status = key
            self.requests[(protocol, OTHER, end, status)] += self.requests.pop(key)

    def request_totals(self, *labels: int) -> dict[tuple, int]:
        """Requests summed by the labels at these places of the key (0 protocol, 1 scenario, 2 end, 3 status)."""
        self.fold()
        summed: Counter[tuple] = Counter()
        for key, count in self.requests.items():
            summed[tuple(NONE if key[place] is None else str(key[place]) for place in labels)] += count
        return dict(sorted(summed.items()))

    def stream_totals(self) -> dict[tuple, Stream]:
        """What the streams sent, by protocol."""
        self.fold()
        return {
            (NONE if protocol is None else protocol,): self.streams[protocol]
            for protocol in sorted(self.streams, key=str)
        }

    def in_progress(self) -> int:
        """Requests opened and not closed yet: every request opens a record, and closes it once."""
        self.fold()
        return len(self.open)

    def open_streams(self) -> dict[tuple, int]:
        """Streams going out now (a 200 whose SSE has begun and not ended), by protocol."""
        self.fold()
        streaming = Counter(
            map(PROTOCOL, compress(self.open, map(eq, map(STREAM_STATUS, self.open), repeat(STREAMED_200))))
        )
        return {
            (NONE if protocol is None else protocol,): count for protocol, count in sorted(streaming.items(), key=str)
        }

    def snapshot(self) -> dict:
        """The counts as JSON, for the other servers on a shared state (see SharedCounts)."""
        return {
            "requests": [[*key, count] for key, count in self.request_totals(0, 1, 2, 3).items()],
            "streams": {
                protocol: {name: getattr(stream, name) for name in Stream.__slots__}
                for (protocol,), stream in self.stream_totals().items()
            },
            "in_progress": self.in_progress(),
            "open_streams": {protocol: count for (protocol,), count in self.open_streams().items()},
        }


class SharedCounts:
    """The counts of every server on a shared state: the sum of their snapshots (Counts.snapshot),
    read as Collector reads Counts."""

    def __init__(self, snapshots: list[dict]):
        self.snapshots = snapshots

    def request_totals(self, *labels: int) -> dict[tuple, int]:
        summed: Counter[tuple] = Counter()
        for snapshot in self.snapshots:
            for *key, count in snapshot["requests"]:
                summed[tuple(key[place] for place in labels)] += count
        return dict(sorted(summed.items()))

    def stream_totals(self) -> dict[tuple, Stream]:
        summed: dict[tuple, Stream] = {}
        for snapshot in self.snapshots:
            for protocol, sent in snapshot["streams"].items():
                stream = summed.setdefault((protocol,), Stream())
                stream.bytes += sent["bytes"]
                stream.events += sent["events"]
                stream.keepalives += sent["keepalives"]
                stream.duration_sum += sent["duration_sum"]
                stream.durations = [mine + theirs for mine, theirs in zip(stream.durations, sent["durations"])]
        return dict(sorted(summed.items()))

    def in_progress(self) -> int:
        return sum(snapshot["in_progress"] for snapshot in self.snapshots)

    def open_streams(self) -> dict[tuple, int]:
        summed: Counter[tuple] = Counter()
        for snapshot in self.snapshots:
            summed.update({(protocol,): count for protocol, count in snapshot["open_streams"].items()})
        return dict(sorted(summed.items()))


COUNTED = attrgetter("protocol", "scenario", "end", "status", "sent_bytes", "events", "keepalives", "stream")
PATH, PROTOCOL, END, DURATION = map(attrgetter, ("path", "protocol", "end", "duration"))
# A duration's place in Stream.durations: the first bucket whose bound it does not pass, or +Inf's.
BUCKET_OF = partial(bisect_left, DURATION_BUCKETS)
STREAM_STATUS = attrgetter("stream", "status")
STREAMED_200 = (
    True,
    200,
)  # a stream that went out (or is going out): open while under way, in the histogram once ended


class Collector:
    """The Prometheus families of `counts`, built as they are read."""

    def __init__(self, counts: Counts | SharedCounts):
        self.counts = counts

    def collect(self) -> Iterator:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        counts = self.counts
        requests = CounterMetricFamily(
            "fakehop_requests",
            "Requests answered, by protocol, scenario and how the answer ended",
            labels=("protocol", "scenario", "end"),
        )
        for labels, total in counts.request_totals(0, 1, 2).items():
            requests.add_metric(labels, total)
        yield requests
        statuses = CounterMetricFamily(
            "fakehop_responses", "Answers by HTTP status (none: the client went first)", labels=("status",)
        )
        for labels, total in counts.request_totals(3).items():
            statuses.add_metric(labels, total)
        yield statuses
        yield GaugeMetricFamily(
            "fakehop_requests_in_progress",
            "Requests being answered now, of every kind: open streams, and answers still under way",
            value=counts.in_progress(),
        )
        streams = GaugeMetricFamily(
            "fakehop_open_streams",
            "SSE streams going out now: a 200 whose stream has begun and not ended",
            labels=("protocol",),
        )
        for labels, count in counts.open_streams().items():
            streams.add_metric(labels, count)
        yield streams
        by_protocol = counts.stream_totals()
        for name, field, help_text in (
            ("fakehop_stream_bytes", "bytes", "Bytes of SSE written to streams"),
            ("fakehop_stream_events", "events", "SSE events written to streams (keepalives not counted)"),
            ("fakehop_keepalives", "keepalives", "Keepalive comments written to streams"),
        ):
            family = CounterMetricFamily(name, help_text, labels=("protocol",))
            for labels, sent in by_protocol.items():
                family.add_metric(labels, getattr(sent, field))
            yield family
        durations = HistogramMetricFamily(
            "fakehop_stream_duration_seconds", "Streams from the request's arrival to their end", labels=("protocol",)
        )
        for labels, sent in by_protocol.items():
            durations.add_metric(labels, cumulative_buckets(sent.durations), sent.duration_sum)
        yield durations


def cumulative_buckets(counts: list[int]) -> list[tuple[str, int]]:
    buckets, total = [], 0
    for bound, count in zip((*map(str, DURATION_BUCKETS), "+Inf"), counts):
        total += count
        buckets.append((bound, total))
    return buckets


COUNTS_KEY: web.AppKey[Counts] = web.AppKey("metrics", Counts)


def count_for(app: web.Application, journal: Journal) -> None:
    """Count every record of `journal` that opens while `app` runs, once it has closed.

    The counts fold at most as many openings at a time as the journal keeps records. Folding
    FOLD_BATCH at a time, a journal of fewer would leave them holding the records it let go,
    to let go of in one heap: glibc gives so large a freed block back to the system, and the
    next answers fault it in again page by page (chat with 200 deltas and `--journal-size
    100`: 9 page faults an answer, a third more CPU)."""
    counts = app[COUNTS_KEY] = Counts(min(FOLD_BATCH, journal.capacity))
    journal.opened_listeners.append(counts.add)
    journal.overflow_listeners.append(counts.overflowed)  # records the journal lets go of go from here too, counted

    async def stop_counting(_app: web.Application) -> None:
        journal.opened_listeners.remove(counts.add)
        journal.overflow_listeners.remove(counts.overflowed)

    app.on_cleanup.append(stop_counting)


def publish_for(app: web.Application, state: RedisState) -> None:
    """With --state: this server's counts published every PUBLISH_INTERVAL seconds while `app` runs."""

    async def publishing(_app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(publish_every(app[COUNTS_KEY], state))
        yield
        task.cancel()

    app.cleanup_ctx.append(publishing)


async def publish_every(counts: Counts, state: RedisState) -> None:
    while True:
        try:
            await state.publish_metrics(counts.snapshot())
        except StateDown:  # published again once Redis answers
            pass
        await asyncio.sleep(PUBLISH_INTERVAL)


async def metrics(request: web.Request) -> web.Response:
    """This server's counts; with --state, every server's together (each as it last published them)."""
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

    counts: Counts | SharedCounts = request.config_dict[COUNTS_KEY]
    state = request.config_dict[GATEWAY_KEY].state
    if state is not None:
        await state.publish_metrics(cast(Counts, counts).snapshot())
        counts = SharedCounts(await state.metrics_snapshots())
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector(counts))
    return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})


def add_routes(control_app: web.Application) -> None:
    control_app.router.add_get("/metrics", control_call(metrics))
