"""The run's report, `pytest --fakehop-report PATH`: one record per test that used fakehop.

Each record is JSON, made where the test ran (`gathered`, at its teardown, so that an xdist
worker sends it to the controller on the test's report) and given its node id and outcome
where the run is reported. `PATH` ending in `.json` gets `{"tests": [...]}`; in `.html`, one
page with nothing to fetch: a table of tests against the faults they were swept with, coloured
by outcome, and a timeline of each test's streams. The terminal gets a short table of the same.
Nothing here needs pytest.
"""

from __future__ import annotations

import html
import json
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ..state import journal as jr
from ..verdicts import ERROR, WARNING, Finding

SUFFIXES = (".json", ".html")
OUTCOMES = ("passed", "failed", "skipped")
MAX_SUMMARY_ROWS = 40  # of the terminal's table; the file has them all
MAX_TEST_WIDTH = 90  # characters of a node id in the terminal's table; longer ones keep their end
NO_SWEEP = "no sweep"


class ReportProblem(ValueError):
    """A report path that cannot be written."""


def checked_path(text: str) -> Path:
    path = Path(text)
    if path.suffix not in SUFFIXES:
        raise ReportProblem(f"--fakehop-report: expected a path ending in .json or .html, got {text!r}")
    return path


# ---------------------------------------------------------------- what a test gives


def gathered(streams: Sequence[dict[str, Any]], findings: Sequence[Finding], sweep: str | None) -> dict[str, Any]:
    """A test's record, from its session's journal (`Fakehop.streams()`) and findings."""
    first = min((record["started_at"] for record in streams), default=0.0)
    return {
        "sweep": sweep,
        "faults": list(dict.fromkeys(kind for record in streams for kind in record["faults"])),
        "requests": {
            "count": len(streams),
            "ends": dict(Counter(record["end"] for record in streams)),
            "each": [request_of(record, first) for record in streams],
        },
        "findings": [
            {"rule": f.rule, "severity": f.severity, "message": f.message, "seqs": list(f.seqs)} for f in findings
        ],
    }


def unrun(sweep: str | None) -> dict[str, Any]:
    """The record of a test that asked for fakehop and never got it (skipped before its setup)."""
    return gathered([], [], sweep)


def request_of(record: dict[str, Any], first: float) -> dict[str, Any]:
    return {
        "seq": record["seq"],
        "protocol": record["protocol"],
        "path": record["path"],
        "stream": record["stream"],
        "status": record["status"],
        "end": record["end"],
        "faults": record["faults"],
        "error": record["error"],
        "offset": round(record["started_at"] - first, 6),  # seconds after the test's first request
        "duration": record["duration"],
        "timeline": marks(record["frames"]),
    }


def marks(frames: Iterable[Sequence[Any]]) -> list[list[Any]]:
    """Each SSE event and keepalive of a stream's frames, as `[seconds, kind]`: `delta` (a piece
    of output), `keepalive`, `error` (the protocol's in-stream error) or `event` (any other)."""
    return [
        [at, "keepalive" if block.startswith(":") else event_kind(block)]
        for at, text in frames
        for block in text.split("\n\n")
        if block.strip()
    ]


def event_kind(block: str) -> str:
    name = ""
    data = []
    for line in block.split("\n"):
        if line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
    if name == "error" or name.endswith(".failed"):
        return "error"
    if name == "content_block_delta" or name.endswith(".delta"):
        return "delta"
    try:
        event = json.loads("\n".join(data))
    except ValueError:
        return "event"
    if isinstance(event, dict) and "error" in event:
        return "error"
    return "delta" if chat_output(event) else "event"


def chat_output(event: Any) -> bool:
    """Whether a Chat Completions chunk carries output: text, reasoning or a tool call's pieces."""
    if not isinstance(event, dict) or not isinstance(event.get("choices"), list) or not event["choices"]:
        return False
    delta = event["choices"][0].get("delta") if isinstance(event["choices"][0], dict) else None
    return isinstance(delta, dict) and any(delta.get(key) for key in ("content", "reasoning_content", "tool_calls"))


# ---------------------------------------------------------------- the run's report


def outcome_of(phases: Iterable[str]) -> str:
    """A test's outcome from those of its phases (setup, call, teardown): failed when any failed."""
    seen = set(phases)
    return next((outcome for outcome in ("failed", "skipped") if outcome in seen), "passed")


def write(path: Path, tests: Sequence[dict[str, Any]]) -> None:
    """The report at `path`, its directories made first (as --junitxml's are)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = page(tests) if path.suffix == ".html" else json.dumps({"tests": list(tests)}, indent=2) + "\n"
    path.write_text(text, encoding="utf-8")


def summary(tests: Sequence[dict[str, Any]]) -> list[str]:
    """The terminal's table: a line a test (failed ones first past MAX_SUMMARY_ROWS), then the counts."""
    shown = sorted(tests, key=lambda test: test["outcome"] != "failed")[:MAX_SUMMARY_ROWS]
    rows = [("test", "outcome", "faults", "requests", "findings")]
    rows += [
        (
            clipped(test["nodeid"]),
            test["outcome"],
            ", ".join(test["faults"]) or "-",
            ends_text(test["requests"]),
            findings_text(test["findings"]) or "-",
        )
        for test in sorted(shown, key=tests.index)
    ]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]) - 1)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1] for row in rows]
    if len(tests) > len(shown):
        lines.append(f"... and {len(tests) - len(shown)} more tests in the report")
    outcomes = Counter(test["outcome"] for test in tests)
    counted = ", ".join(f"{outcomes[outcome]} {outcome}" for outcome in OUTCOMES if outcomes[outcome])
    findings = [finding for test in tests for finding in test["findings"]]
    lines.append(
        f"{plural(len(tests), 'test')} with fakehop ({counted or 'none'}); "
        f"{plural(len(findings), 'finding')}{' (' + findings_text(findings) + ')' if findings else ''}"
    )
    return lines


def clipped(nodeid: str) -> str:
    return nodeid if len(nodeid) <= MAX_TEST_WIDTH else "…" + nodeid[-(MAX_TEST_WIDTH - 1) :]


def ends_text(requests: dict[str, Any]) -> str:
    ends = ", ".join(f"{count} {end}" for end, count in requests["ends"].items())
    return f"{requests['count']}" + (f": {ends}" if ends else "")


def findings_text(findings: Sequence[dict[str, Any]]) -> str:
    counts = Counter(finding["severity"] for finding in findings)
    return ", ".join(plural(counts[severity], severity) for severity in (ERROR, WARNING) if counts[severity])


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


# ---------------------------------------------------------------- the HTML page


STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1d2330; }
table.matrix { border-collapse: collapse; margin-bottom: 2em; }
.matrix th, .matrix td { border: 1px solid #c9ced8; padding: 4px 8px; text-align: left; }
.matrix td.test { font-family: ui-monospace, monospace; }
td.passed { background: #d6f5dd; } td.failed { background: #f9d2d2; } td.skipped { background: #e6e7ea; }
td a { color: inherit; } .count { color: #555c6b; font-size: 12px; }
section { border-top: 1px solid #c9ced8; padding-top: .5em; margin-top: 1em; }
h3 { font: 600 14px ui-monospace, monospace; margin: 0 0 .3em; }
.passed-text { color: #1b7a35; } .failed-text { color: #b3261e; } .skipped-text { color: #5f6470; }
ul.findings { margin: .3em 0; } .error { color: #b3261e; } .warning { color: #8a5a00; }
svg text { font: 11px ui-monospace, monospace; fill: #1d2330; }
"""
COLOURS = {"delta": "#2f6fdb", "keepalive": "#8c919c", "error": "#c62828", "event": "#b7bcc6"}
END_COLOURS = {"good": "#2e7d32", "bad": "#c62828", "warn": "#b26a00", "faint": "#8c919c", "": "#8c919c"}
LABEL_WIDTH, PLOT_WIDTH, ROW_HEIGHT, AXIS_HEIGHT = 230, 640, 22, 26


def page(tests: Sequence[dict[str, Any]]) -> str:
    findings = sum(len(test["findings"]) for test in tests)
    sections = "\n".join(test_section(number, test) for number, test in enumerate(tests))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>fakehop report</title>
<style>{STYLE}</style></head>
<body>
<h1>fakehop report</h1>
<p>{plural(len(tests), "test")} with fakehop, {plural(findings, "finding")}.</p>
{matrix(tests)}
{LEGEND}
{sections}
</body></html>
"""


def matrix(tests: Sequence[dict[str, Any]]) -> str:
    """Tests (their node ids less the sweep's id) against the faults they were swept with."""
    columns = list(dict.fromkeys(test["sweep"] or NO_SWEEP for test in tests))
    rows: dict[str, dict[str, int]] = {}
    for number, test in enumerate(tests):
        rows.setdefault(unswept(test["nodeid"], test["sweep"]), {})[test["sweep"] or NO_SWEEP] = number
    head = "".join(f"<th>{html.escape(column)}</th>" for column in columns)
    body = "\n".join(
        f'<tr><td class="test">{html.escape(name)}</td>'
        + "".join(cell(tests, cells[column]) if column in cells else "<td></td>" for column in columns)
        + "</tr>"
        for name, cells in rows.items()
    )
    return f'<table class="matrix"><thead><tr><th>test</th>{head}</tr></thead>\n<tbody>\n{body}\n</tbody></table>'


def cell(tests: Sequence[dict[str, Any]], number: int) -> str:
    test = tests[number]
    findings = findings_text(test["findings"])
    detail = plural(test["requests"]["count"], "request") + (f", {findings}" if findings else "")
    return (
        f'<td class="{test["outcome"]}"><a href="#test-{number}">{test["outcome"]}</a>'
        f'<br><span class="count">{html.escape(detail)}</span></td>'
    )


def unswept(nodeid: str, sweep: str | None) -> str:
    """`test_x[fault-truncate]` -> `test_x`; `test_x[a-fault-truncate]` -> `test_x[a]`."""
    if sweep is None or not nodeid.endswith("]") or "[" not in nodeid:
        return nodeid
    name, _, ids = nodeid[:-1].partition("[")
    parts = ids.split(sweep)
    if len(parts) == 1:
        return nodeid
    rest = "-".join(part.strip("-") for part in parts if part.strip("-"))
    return f"{name}[{rest}]" if rest else name


def test_section(number: int, test: dict[str, Any]) -> str:
    requests = test["requests"]
    facts = [
        f'<span class="{test["outcome"]}-text">{test["outcome"]}</span>',
        "faults: " + html.escape(", ".join(test["faults"]) or "none"),
        "requests: " + html.escape(ends_text(requests)),
    ]
    findings = "".join(
        f'<li><span class="{html.escape(f["severity"])}">{html.escape(f["severity"])}</span> '
        f"<b>{html.escape(f['rule'])}</b> {html.escape(f['message'])}</li>"
        for f in test["findings"]
    )
    return (
        f'<section id="test-{number}"><h3>{html.escape(test["nodeid"])}</h3>\n<p>{" · ".join(facts)}</p>\n'
        + (f'<ul class="findings">{findings}</ul>\n' if findings else "")
        + (timeline(requests["each"]) if requests["each"] else "")
        + "</section>"
    )


def timeline(requests: Sequence[dict[str, Any]]) -> str:
    """An SVG of a test's requests, a row each on one time axis: a line from arrival to end, a
    mark for each event and keepalive of its stream, and a dot for how it ended."""
    span = max(request["offset"] + max(request["duration"] or 0.0, last_mark(request)) for request in requests)
    span = max(span, 0.001)
    scale = PLOT_WIDTH / span
    height = AXIS_HEIGHT + ROW_HEIGHT * len(requests)
    rows = "\n".join(request_row(row, request, scale) for row, request in enumerate(requests))
    return (
        f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="{LABEL_WIDTH + PLOT_WIDTH + 20}" '
        f'height="{height}" role="img" aria-label="timeline of the requests">\n{axis(span, scale, height)}\n{rows}\n</svg>\n'
    )


def last_mark(request: dict[str, Any]) -> float:
    return max((at for at, _ in request["timeline"]), default=0.0)


def axis(span: float, scale: float, height: float) -> str:
    step = tick_step(span)
    ticks = []
    for index in range(int(span / step) + 1):
        x = LABEL_WIDTH + index * step * scale
        ticks.append(
            f'<line x1="{x:.1f}" y1="14" x2="{x:.1f}" y2="{height}" stroke="#e3e6eb"/>'
            f'<text x="{x:.1f}" y="11" text-anchor="middle">{index * step:g}s</text>'
        )
    return "".join(ticks)


TICK_STEPS = tuple(float(f"{digit}e{power}") for power in range(-3, 6) for digit in (1, 2, 5))


def tick_step(span: float) -> float:
    """The first round step (1, 2 or 5 times a power of ten) that puts at most eight ticks on `span` seconds."""
    return next((step for step in TICK_STEPS if span / step <= 8), TICK_STEPS[-1])


def request_row(row: int, request: dict[str, Any], scale: float) -> str:
    y = AXIS_HEIGHT + row * ROW_HEIGHT + ROW_HEIGHT / 2
    start = LABEL_WIDTH + request["offset"] * scale
    end = start + (request["duration"] or last_mark(request)) * scale
    label = f"#{request['seq']} {request['protocol'] or '-'} {request['status'] or '-'} {request['end']}"
    shapes = [
        f'<text x="4" y="{y + 4:.1f}">{html.escape(label)}</text>',
        f'<line x1="{start:.1f}" y1="{y:.1f}" x2="{end:.1f}" y2="{y:.1f}" stroke="#aeb4bf" stroke-width="2"/>',
    ]
    tone = END_COLOURS[jr.END_TONES.get(request["end"], "")]
    shapes.append(  # under the stream's marks, which often end where it does
        f'<circle class="end" cx="{end:.1f}" cy="{y:.1f}" r="4" fill="{tone}" fill-opacity="0.6">'
        f"<title>{html.escape(request['end'])} after {request['duration'] or 0:.3f}s"
        f"{': ' + html.escape(request['error']) if request['error'] else ''}</title></circle>"
    )
    shapes += [mark(start + at * scale, y, at, kind) for at, kind in request["timeline"]]
    return f'<g class="request">{"".join(shapes)}</g>'


def mark(x: float, y: float, at: float, kind: str) -> str:
    colour = COLOURS[kind]
    title = f"<title>{kind} at {at:.3f}s</title>"
    if kind == "keepalive":
        return (
            f'<circle class="keepalive" cx="{x:.1f}" cy="{y:.1f}" r="3" fill="none" stroke="{colour}">{title}</circle>'
        )
    if kind == "error":
        return f'<path class="error" d="M{x - 4:.1f},{y - 4:.1f}l8,8m0,-8l-8,8" stroke="{colour}" stroke-width="2">{title}</path>'
    return f'<rect class="{kind}" x="{x - 1:.1f}" y="{y - 6:.1f}" width="2" height="12" fill="{colour}">{title}</rect>'


LEGEND = (
    '<p><svg width="460" height="18" xmlns="http://www.w3.org/2000/svg">'
    + "".join(
        mark(12 + 110 * index, 9, 0.0, kind) + f'<text x="{22 + 110 * index}" y="13">{kind}</text>'
        for index, kind in enumerate(("delta", "keepalive", "error", "event"))
    )
    + "</svg></p>"
)
