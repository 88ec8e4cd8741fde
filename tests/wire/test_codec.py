"""Round trips for every declared API and version, and kafka-python's encoder as an independent oracle."""

from __future__ import annotations

import os
import random
import uuid
from pathlib import Path
from typing import Any

import kafka.errors
import kafka.protocol.admin
import kafka.protocol.consumer
import kafka.protocol.metadata
import kafka.protocol.producer
import kafka.protocol.sasl
import pytest

from mover.wire import (
    ALL_APIS,
    API_BY_KEY,
    Api,
    EncodeError,
    ErrorCode,
    FileRegion,
    decode_request,
    decode_response,
    decode_struct,
    encode_request,
    encode_response,
    encode_struct,
    frame_length,
    join_chunks,
)
from mover.wire.messages import (
    ALTER_REPLICA_LOG_DIRS,
    API_VERSIONS,
    DESCRIBE_LOG_DIRS,
    DESCRIBE_REPLICA_MOVES,
    FETCH,
    PRODUCE,
)
from tests.wire.samples import sample_struct

CASES = [
    pytest.param(api, kind, v, id=f"{api.name}-{kind}-v{v}")
    for api in ALL_APIS
    for kind in ("request", "response")
    for v in range(api.valid.lo, api.valid.hi + 1)
]

EXPECTED_RANGES = {
    18: (0, 4),
    3: (0, 12),
    35: (0, 5),
    34: (0, 2),
    19: (0, 7),
    20: (0, 6),
    32: (0, 4),
    44: (0, 1),
    37: (0, 3),
    33: (0, 2),
    0: (3, 9),
    1: (4, 12),
    2: (1, 7),
    22: (0, 4),
    32100: (0, 0),
    17: (0, 1),
    36: (0, 2),
    29: (0, 3),
    30: (0, 3),
    31: (0, 3),
    51: (0, 0),
    43: (0, 2),
    45: (0, 0),
    46: (0, 0),
}


def test_declared_version_ranges() -> None:
    assert {k: (a.valid.lo, a.valid.hi) for k, a in API_BY_KEY.items()} == EXPECTED_RANGES


@pytest.mark.parametrize(("api", "kind", "version"), CASES)
def test_round_trip(api: Api, kind: str, version: int) -> None:
    rng = random.Random(f"{api.key}-{kind}-{version}")
    s = getattr(api, kind)
    flexible = api.is_flexible(version)
    for _ in range(25):
        value = sample_struct(rng, s, version)
        data = join_chunks(encode_struct(s, version, flexible, value))
        assert decode_struct(s, version, flexible, data) == value
        if kind == "request":
            framed = join_chunks(encode_request(api, version, 99, value, client_id="c"))
            assert int.from_bytes(framed[:4], "big") == len(framed) - 4
            header, body = decode_request(framed[4:])
            assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
                api.key,
                version,
                99,
                "c",
            )
            assert body == value
        else:
            framed = join_chunks(encode_response(api, version, 77, value))
            rh, body = decode_response(api, version, framed[4:])
            assert rh.correlation_id == 77
            assert body == value


def _kafka_python_class(api: Api, kind: str) -> Any:
    name = api.name + kind.capitalize()
    for mod in (kafka.protocol.admin, kafka.protocol.metadata, kafka.protocol.producer, kafka.protocol.consumer,
                kafka.protocol.sasl):
        if hasattr(mod, name):
            return getattr(mod, name)
    return None


ORACLE_CASES = [c for c in CASES if c.values[0] is not DESCRIBE_REPLICA_MOVES]


@pytest.mark.parametrize(("api", "kind", "version"), ORACLE_CASES)
def test_kafka_python_reencodes_our_bytes_identically(api: Api, kind: str, version: int) -> None:
    """kafka-python 3.0.12 generates its codec from Kafka's own JSON schemas: an independent implementation.

    Decoding our bytes with it and re-encoding must give the same bytes, for random values of every field.
    """
    cls = _kafka_python_class(api, kind)
    assert cls is not None
    rng = random.Random(f"oracle-{api.key}-{kind}-{version}")
    s = getattr(api, kind)
    flexible = api.is_flexible(version)
    for _ in range(25):
        value = sample_struct(rng, s, version)
        if api is API_VERSIONS and kind == "response":
            value["error_code"] = 0  # kafka-python (like the Java client) reads an error reply as v0
        if api is ALTER_REPLICA_LOG_DIRS and kind == "response":
            # Our tagged request_id is not in Kafka's schema: kafka-python skips it, so it cannot re-encode it
            # (tests/api/test_log_dirs.py checks that it still decodes such a response).
            value["request_id"] = -1
        data = join_chunks(encode_struct(s, version, flexible, value))
        obj = cls.decode(data, version=version)
        if not hasattr(obj, "_header"):
            obj._header = None  # kafka-python's decode skips __init__; its encode reads this slot
        assert obj.encode(version=version) == data


def test_golden_api_versions_v3_request() -> None:
    frame = join_chunks(
        encode_request(API_VERSIONS, 3, 7, {"client_software_name": "x", "client_software_version": "1"})
    )
    # size 21 | key 18 | v3 | corr 7 | client_id "mover" (int16 length even in header v2) | no header tags |
    # compact "x" | compact "1" | no body tags
    assert frame.hex() == "0000001500120003000000070005" + b"mover".hex() + "000278023100"


def test_golden_describe_log_dirs_v1_null_topics_matches_kafka_python() -> None:
    ours = join_chunks(encode_request(DESCRIBE_LOG_DIRS, 1, 5, {"topics": None}, client_id="kp"))
    req = kafka.protocol.admin.DescribeLogDirsRequest(topics=None, version=1)
    req.with_header(correlation_id=5, client_id="kp")
    assert ours == req.encode(header=True, framed=True)
    assert ours.hex().endswith("ffffffff")


def test_golden_alter_replica_log_dirs_v1_matches_kafka_python() -> None:
    body = {"dirs": [{"path": "/d2", "topics": [{"name": "t", "partitions": [0, 3]}]}]}
    ours = join_chunks(encode_request(ALTER_REPLICA_LOG_DIRS, 1, 1, body, client_id="kp"))
    kp = kafka.protocol.admin.AlterReplicaLogDirsRequest
    req = kp(
        dirs=[
            kp.AlterReplicaLogDir(
                path="/d2", topics=[kp.AlterReplicaLogDir.AlterReplicaLogDirTopic(name="t", partitions=[0, 3])]
            )
        ],
        version=1,
    )
    req.with_header(correlation_id=1, client_id="kp")
    assert ours == req.encode(header=True, framed=True)


def test_golden_api_versions_response_header_is_v0_even_when_flexible() -> None:
    body = {"error_code": 0, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 4}]}
    frame = join_chunks(encode_response(API_VERSIONS, 3, 9, body))
    # corr 9 then straight into the body: no header tagged-field byte
    assert frame[4:8] == b"\x00\x00\x00\x09"
    assert frame[8:10] == b"\x00\x00"
    kp = kafka.protocol.metadata.ApiVersionsResponse.decode(frame, version=3, header=True, framed=True)
    assert kp.header.correlation_id == 9
    assert [(k.api_key, k.min_version, k.max_version) for k in kp.api_keys] == [(18, 0, 4)]


def test_describe_log_dirs_response_v1_matches_tshark_era_layout() -> None:
    body = {
        "throttle_time_ms": 0,
        "results": [
            {
                "error_code": 0,
                "log_dir": "/d",
                "topics": [
                    {
                        "name": "t",
                        "partitions": [
                            {"partition_index": 1, "partition_size": 2, "offset_lag": 3, "is_future_key": True}
                        ],
                    }
                ],
            }
        ],
    }
    frame = join_chunks(encode_response(DESCRIBE_LOG_DIRS, 1, 1, body))
    expected = (
        "00000001"  # correlation id (header v0)
        "00000000"  # throttle
        "00000001"
        "0000"
        "0002"
        + b"/d".hex()  # one result, no error, log dir
        + "00000001"
        "0001"
        + b"t".hex()  # one topic
        + "00000001"
        "00000001"
        "0000000000000002"
        "0000000000000003"
        "01"
    )
    assert frame[4:].hex() == expected


def test_records_as_file_region_are_chunked_not_copied(tmp_path: Path) -> None:
    payload = bytes(range(256)) * 10
    (tmp_path / "segment").write_bytes(payload)
    fd = os.open(tmp_path / "segment", os.O_RDONLY)
    sl = FileRegion(fd, 100, 1000, owned=True)
    part = {"partition_index": 0, "high_watermark": 5, "records": sl}
    body = {"responses": [{"topic": "t", "partitions": [part]}]}
    chunks = encode_response(FETCH, 11, 3, body)
    assert any(c is sl for c in chunks)
    assert all(isinstance(c, bytes) or c is sl for c in chunks)
    framed = join_chunks(chunks)
    assert frame_length(chunks) == len(framed)
    assert int.from_bytes(framed[:4], "big") == len(framed) - 4
    inline = dict(part, records=payload[100:1100])
    assert framed == join_chunks(encode_response(FETCH, 11, 3, {"responses": [{"topic": "t", "partitions": [inline]}]}))
    _, decoded = decode_response(FETCH, 11, framed[4:])
    sl.close()
    assert decoded["responses"][0]["partitions"][0]["records"] == payload[100:1100]


def test_flexible_records_slice_uses_compact_length(tmp_path: Path) -> None:
    (tmp_path / "segment").write_bytes(b"x" * 300)
    sl = FileRegion(os.open(tmp_path / "segment", os.O_RDONLY), 0, 300, owned=True)
    body = {"responses": [{"topic": "t", "partitions": [{"records": sl}]}]}
    framed = join_chunks(encode_response(FETCH, 12, 3, body))
    sl.close()
    _, decoded = decode_response(FETCH, 12, framed[4:])
    assert decoded["responses"][0]["partitions"][0]["records"] == b"x" * 300


def test_produce_request_records_decoded_as_bytes() -> None:
    body = {
        "acks": 1,
        "timeout_ms": 100,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b"abc"}]}],
    }
    for v in (3, 9):
        header, got = decode_request(join_chunks(encode_request(PRODUCE, v, 1, body))[4:])
        assert got["topic_data"][0]["partition_data"][0]["records"] == b"abc"
        assert got["transactional_id"] is None


def test_absent_fields_decode_to_defaults() -> None:
    header, req = decode_request(join_chunks(encode_request(FETCH, 4, 1, {"topics": []}))[4:])
    assert req["max_bytes"] == 0x7FFFFFFF
    assert req["session_epoch"] == -1
    assert req["rack_id"] == ""
    assert req["cluster_id"] is None
    assert req["forgotten_topics_data"] == []


def test_encode_errors() -> None:
    with pytest.raises(EncodeError, match="unknown fields"):
        encode_struct(DESCRIBE_LOG_DIRS.request, 1, False, {"topicz": None})
    with pytest.raises(EncodeError):
        encode_struct(ALTER_REPLICA_LOG_DIRS.request, 1, False, {"dirs": None})
    with pytest.raises(EncodeError):
        encode_struct(DESCRIBE_LOG_DIRS.response, 1, False, {"throttle_time_ms": 2**31})
    with pytest.raises(EncodeError):
        encode_struct(DESCRIBE_LOG_DIRS.response, 1, False, {"throttle_time_ms": "1"})
    with pytest.raises(EncodeError):
        encode_struct(DESCRIBE_LOG_DIRS.response, 1, False, {"results": [{"log_dir": None}]})
    with pytest.raises(EncodeError):
        encode_request(PRODUCE, 2, 1, {})
    # a non-flexible string has an int16 length
    with pytest.raises(EncodeError):
        encode_struct(ALTER_REPLICA_LOG_DIRS.request, 1, False, {"dirs": [{"path": "x" * 40000}]})
    encode_struct(ALTER_REPLICA_LOG_DIRS.request, 2, True, {"dirs": [{"path": "x" * 40000}]})


def test_describe_replica_moves_round_trip() -> None:
    body = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "request_id": 4,
        "requests": [
            {
                "request_id": 4,
                "start_ms": 1700000000000,
                "end_ms": -1,
                "replicas": [
                    {
                        "topic": "t",
                        "partition": 0,
                        "source_dir": "/d1",
                        "destination_dir": "/d2",
                        "state": "copying",
                        "bytes_copied": 10,
                        "bytes_total": -1,
                        "error_code": 0,
                        "error_message": None,
                    }
                ],
            }
        ],
    }
    frame = join_chunks(encode_response(DESCRIBE_REPLICA_MOVES, 0, 1, body))
    assert frame[8] == 0  # flexible: response header v1 carries an empty tagged section
    assert decode_response(DESCRIBE_REPLICA_MOVES, 0, frame[4:])[1] == body
    _, req = decode_request(join_chunks(encode_request(DESCRIBE_REPLICA_MOVES, 0, 1, {}))[4:])
    assert req == {"request_id": -1}


def test_uuid_fields() -> None:
    tid = uuid.uuid4()
    body = {"topics": [{"name": None, "topic_id": tid}], "timeout_ms": 5}
    _, got = decode_request(join_chunks(encode_request(20, 6, 1, body))[4:])
    assert got["topics"][0]["topic_id"] == tid


def test_error_codes_match_kafka_python() -> None:
    theirs = {cls.errno: cls for cls in kafka.errors.kafka_errors.values()}
    for code in (-1, 0, 1, 2, 3, 6, 7, 9, 10, 17, 18, 31, 35, 36, 37, 38, 40, 42, 45, 46, 47, 56, 57, 58, 59):
        assert code in ErrorCode._value2member_map_
    # every code kafka-python knows within our range is declared here too
    assert {c for c in theirs if c is not None and -1 <= c <= 120} <= set(ErrorCode)
    assert ErrorCode.UNSUPPORTED_VERSION == 35
    assert ErrorCode.KAFKA_STORAGE_ERROR == 56
    assert ErrorCode.LOG_DIR_NOT_FOUND == 57


@pytest.mark.parametrize("version", range(DESCRIBE_LOG_DIRS.valid.lo, DESCRIBE_LOG_DIRS.valid.hi + 1))
def test_fixed_width_rows_encode_exactly_as_dicts(version: int) -> None:
    rows = [(p, p * 1000 + 7, p % 3, p % 2 == 0) for p in range(50)]
    names = ("partition_index", "partition_size", "offset_lag", "is_future_key")

    def body(parts: list[Any]) -> dict[str, Any]:
        return {"throttle_time_ms": 0, "error_code": 0, "results": [
            {"error_code": 0, "log_dir": "/d1", "topics": [{"name": "t", "partitions": parts}],
             "total_bytes": 10, "usable_bytes": 5}]}

    as_rows = join_chunks(encode_response(DESCRIBE_LOG_DIRS, version, 9, body(rows)))
    dicts = [dict(zip(names, r, strict=True)) for r in rows]
    as_dicts = join_chunks(encode_response(DESCRIBE_LOG_DIRS, version, 9, body(dicts)))
    assert as_rows == as_dicts
    with pytest.raises(EncodeError):
        encode_response(DESCRIBE_LOG_DIRS, version, 9, body([(1, 2, 3)]))
    with pytest.raises(EncodeError):
        encode_response(DESCRIBE_LOG_DIRS, version, 9, body([(2**40, 2, 3, False)]))
