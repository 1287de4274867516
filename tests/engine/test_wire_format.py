"""The control channel's wire format under property-based fuzzing: framing and the request and
response decoders take any bytes without crashing, hanging or allocating what a length field
claims; what the encoder writes decodes to the same fields; bytes that are not fuse's framing
are refused at once instead of being waited for."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuse.engine.channel import split_frames
from fuse.engine.protocol import decode_requests, decode_response, encode_request

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LIMIT = 1 << 30

int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
requests = st.fixed_dictionaries(dict(
    kind=st.integers(0, 255), dtype=st.integers(0, 255), op=st.integers(0, 255), pset=int32,
    root=int32, prescale=st.floats(allow_nan=False), postscale=st.floats(allow_nan=False),
    shape=st.lists(int64, max_size=6), args=st.lists(int64, max_size=6),
    name=st.binary(max_size=40), group_key=st.binary(max_size=10), group_size=int32,
    data=st.binary(max_size=64), on_device=st.booleans()))


def frame(payload: bytes) -> bytes:
    return struct.pack("<I", len(payload)) + payload


@FUZZ
@given(st.lists(st.binary(max_size=200), max_size=8), st.binary(max_size=3))
def test_frames_split_back_into_what_was_sent(payloads, tail):
    data = b"".join(frame(p) for p in payloads) + tail
    frames, rest = split_frames(data)
    assert frames == payloads
    assert rest == tail


@FUZZ
@given(st.binary(max_size=2000))
def test_any_bytes_either_split_or_are_refused(data):
    try:
        frames, rest = split_frames(data)
    except ValueError as err:
        assert "limit" in str(err)
        return
    assert sum(4 + len(f) for f in frames) + len(rest) == len(data)


@given(st.integers(LIMIT + 1, 2**32 - 1), st.binary(max_size=100))
@settings(max_examples=50, deadline=None)
def test_a_length_beyond_the_limit_is_refused_at_once(length, junk):
    # (waiting for such a frame to complete would wait for up to 4 GiB that never come)
    with pytest.raises(ValueError, match="limit"):
        split_frames(struct.pack("<I", length) + junk)


def test_a_frame_at_the_limit_is_only_incomplete():
    frames, rest = split_frames(struct.pack("<I", LIMIT) + b"x")
    assert frames == [] and len(rest) == 5


@FUZZ
@given(st.lists(requests, min_size=1, max_size=4))
def test_requests_round_trip(reqs):
    body = b"".join(encode_request(**r) for r in reqs)
    assert decode_requests(body, len(reqs)) == reqs


@FUZZ
@given(requests, st.data())
def test_a_truncated_request_is_corrupt_not_a_crash(req, data):
    body = encode_request(**req)
    cut = data.draw(st.integers(0, len(body) - 1))
    with pytest.raises(ValueError, match="corrupt"):
        decode_requests(body[:cut], 1)


@FUZZ
@given(st.binary(max_size=600), st.integers(1, 5))
def test_random_request_bytes_decode_or_are_corrupt(body, count):
    try:
        out = decode_requests(body, count)
    except ValueError:
        return
    assert len(out) == count
    # every field came from the bytes: nothing was invented beyond them
    assert all(len(r["name"]) + len(r["data"]) <= len(body) for r in out)


@FUZZ
@given(st.binary(max_size=600))
def test_random_response_bytes_decode_or_are_corrupt(body):
    try:
        names, shapes, payloads, error = decode_response(body)
    except ValueError:
        return
    assert len(names) == len(shapes)
    assert sum(map(len, names)) + sum(map(len, payloads)) + len(error) <= len(body)


def test_huge_counts_in_a_short_message_are_corrupt():
    # a count field of 2**32-1 with nothing behind it must not allocate or loop for long
    with pytest.raises(ValueError):
        decode_response(b"\x01\x02\x00" + b"\x00" * 24 + b"\xff\xff\xff\xff")
    with pytest.raises(ValueError):
        decode_requests(b"\x01" * 3 + b"\x00" * 24 + b"\xff\xff\xff\xff", 1)
