"""GET /_fakehop/metrics: what the server answered, in the Prometheus text format.

The counting is a journal listener that adds each closed record to plain integers and dicts,
keyed by its labels; the Prometheus families are built from those only when the endpoint is
read, by a custom collector, so an answer costs a few dict updates and no call into
prometheus_client. Every counter counts from the server's start: neither reset nor
DELETE /requests takes it back.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Iterator

from aiohttp import web

from .journal import Journal, Record

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
MAX_SERIES = 1000  # label sets counted apart; past that, a new scenario is counted as OTHER
OTHER = "other"
NONE = "none"  # the label of a value a record does not have: no protocol, scenario or status


class Series:
    """What the closed records of one label set add up to."""

    __slots__ = ("requests", "bytes", "events", "keepalives", "durations", "duration_sum")

    def __init__(self) -> None:
        self.requests = self.bytes = self.events = self.keepalives = 0
        self.durations = [0] * (len(DURATION_BUCKETS) + 1)  # of streams, per bucket, not cumulative; the last is +Inf
        self.duration_sum = 0.0


class Counts:
    """The counts of every record closed since `first_seq` was the journal's next, one Series
    per (protocol, scenario, end, status): one dict lookup an answer, the families summed
    from them when read."""

    def __init__(self, journal: Journal):
        self.journal = journal
        self.first_seq = journal.next_seq
        self.series: dict[tuple, Series] = {}

    def add(self, record: Record) -> None:
        """A journal listener: one closed record, counted."""
        key = (record.protocol, record.scenario, record.end, record.status)
        series = self.series.get(key)
        if series is None:
            series = self.new_series(key)
        series.requests += 1
        series.bytes += record.sent_bytes
        series.events += record.events
        series.keepalives += record.keepalives
        if record.stream and record.status == 200:
            series.durations[bisect_left(DURATION_BUCKETS, record.duration)] += 1
            series.duration_sum += record.duration

    def new_series(self, key: tuple) -> Series:
        """The Series of a label set seen for the first time: its own, or once MAX_SERIES are kept
        the one with OTHER for its scenario (scenarios added by calls have no bound)."""
        if len(self.series) >= MAX_SERIES:
            protocol, _, end, status = key
            key = (protocol, OTHER, end, status)
            if key in self.series:
                return self.series[key]
        series = self.series[key] = Series()
        return series

    def totals(self, *labels: int) -> dict[tuple, Series]:
        """The series summed by the labels at these places of the key (0 protocol, 1 scenario, 2 end, 3 status)."""
        summed: dict[tuple, Series] = {}
        for key, series in self.series.items():
            total = summed.setdefault(tuple(NONE if key[place] is None else str(key[place]) for place in labels), Series())
            total.requests += series.requests
            total.bytes += series.bytes
            total.events += series.events
            total.keepalives += series.keepalives
            total.durations = [a + b for a, b in zip(total.durations, series.durations)]
            total.duration_sum += series.duration_sum
        return dict(sorted(summed.items()))

    @property
    def in_progress(self) -> int:
        """Requests opened and not closed yet: every request opens a record, and closes it once."""
        closed = sum(series.requests for series in self.series.values())
        return self.journal.next_seq - self.first_seq - closed


class Collector:
    """The Prometheus families of `counts`, built as they are read."""

    def __init__(self, counts: Counts):
        self.counts = counts

    def collect(self) -> Iterator:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        counts = self.counts
        requests = CounterMetricFamily("fakehop_requests", "Requests answered, by protocol, scenario and how the answer ended",
                                       labels=("protocol", "scenario", "end"))
        for labels, total in counts.totals(0, 1, 2).items():
            requests.add_metric(labels, total.requests)
        yield requests
        statuses = CounterMetricFamily("fakehop_responses", "Answers by HTTP status (none: the client went first)", labels=("status",))
        for labels, total in counts.totals(3).items():
            statuses.add_metric(labels, total.requests)
        yield statuses
        yield GaugeMetricFamily("fakehop_requests_in_progress", "Requests being answered now: open streams, and answers still under way",
                                value=counts.in_progress)
        by_protocol = counts.totals(0)
        for name, field, help_text in (("fakehop_stream_bytes", "bytes", "Bytes of SSE written to streams"),
                                       ("fakehop_stream_events", "events", "SSE events written to streams (keepalives not counted)"),
                                       ("fakehop_keepalives", "keepalives", "Keepalive comments written to streams")):
            family = CounterMetricFamily(name, help_text, labels=("protocol",))
            for labels, total in by_protocol.items():
                family.add_metric(labels, getattr(total, field))
            yield family
        durations = HistogramMetricFamily("fakehop_stream_duration_seconds", "Streams from the request's arrival to their end",
                                          labels=("protocol",))
        for labels, total in by_protocol.items():
            durations.add_metric(labels, cumulative_buckets(total.durations), total.duration_sum)
        yield durations


def cumulative_buckets(counts: list[int]) -> list[tuple[str, int]]:
    buckets, total = [], 0
    for bound, count in zip((*map(str, DURATION_BUCKETS), "+Inf"), counts):
        total += count
        buckets.append((bound, total))
    return buckets


COUNTS_KEY: web.AppKey[Counts] = web.AppKey("metrics", Counts)


def count_for(app: web.Application, journal: Journal) -> None:
    """Count every record of `journal` that closes while `app` runs."""
    counts = app[COUNTS_KEY] = Counts(journal)
    journal.listeners.append(counts.add)

    async def stop_counting(_app: web.Application) -> None:
        journal.listeners.remove(counts.add)

    app.on_cleanup.append(stop_counting)


async def metrics(request: web.Request) -> web.Response:
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector(request.config_dict[COUNTS_KEY]))
    return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})


def add_routes(control_app: web.Application) -> None:
    from .control import control_call

    control_app.router.add_get("/metrics", control_call(metrics))
