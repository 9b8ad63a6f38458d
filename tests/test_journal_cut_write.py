"""The write that goes past a stream's kept 32 KiB: held whole and counted so, shown cut."""

from __future__ import annotations

from fakehop.state import journal as jr

from .test_journal_frames import add, one_record, post

# One write each, no pauses: some 47 KB (cut, held whole) and some 235 KB (its head copied).
ONE_WRITE = {"name": "one-write", "steps": [{"text": {"faker": "words", "nb": 150, "seed": 7}, "chunk": "word"}]}
BIG_WRITE = {"name": "big-write", "steps": [{"text": {"faker": "words", "nb": 800, "seed": 7}, "chunk": "word"}]}


async def test_a_cut_write_is_shown_cut_and_counted_whole(base_url, gateway):
    add(gateway, ONE_WRITE)
    sent = await post(base_url, "one-write")
    assert jr.KEPT_FRAME_BYTES < len(sent) <= jr.WHOLE_CUT_WRITE_BYTES
    [record] = gateway.journal.records
    assert record.frames_cut and record.frame_bytes == jr.KEPT_FRAME_BYTES and record.sent_bytes == len(sent)
    assert b"".join(frame for _, frame in record.frames) == sent[: jr.KEPT_FRAME_BYTES]
    assert b"".join(frame for _, frame in record.snapshot().frames) == sent[: jr.KEPT_FRAME_BYTES]
    status, answer = await one_record(base_url, 1)
    assert (
        status == 200
        and "".join(text for _, text in answer["request"]["frames"]).encode() == sent[: jr.KEPT_FRAME_BYTES]
    )
    held_without_frames = record.held_bytes - len(sent)  # all of the write is counted: it is all held
    assert gateway.journal.bytes == record.held_bytes and held_without_frames == jr.BODY_ALLOWANCE + len(
        record.path
    ) + jr.header_bytes(record.headers)


async def test_a_write_too_big_to_hold_whole_has_its_head_kept(base_url, gateway):
    add(gateway, BIG_WRITE)
    sent = await post(base_url, "big-write")
    assert len(sent) > jr.WHOLE_CUT_WRITE_BYTES
    [record] = gateway.journal.records
    assert b"".join(frame for _, frame in record.frames) == sent[: jr.KEPT_FRAME_BYTES]
    assert record.held_bytes - jr.KEPT_FRAME_BYTES == jr.BODY_ALLOWANCE + len(record.path) + jr.header_bytes(
        record.headers
    )


async def test_the_journal_drops_records_to_hold_their_whole_writes_within_its_bytes(serve, make_gateway):
    gateway = make_gateway(journal=jr.Journal(max_bytes=256 * 1024))
    add(gateway, ONE_WRITE)
    url = await serve(gateway)
    for _ in range(10):
        await post(url, "one-write")
    records = gateway.journal.records
    held = sum(
        len(record.path) + jr.header_bytes(record.headers) + jr.BODY_ALLOWANCE + record.sent_bytes for record in records
    )
    assert all(record.frames_cut for record in records) and held == gateway.journal.bytes <= 256 * 1024
