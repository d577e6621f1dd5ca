"""Protobuf bodies whose attribute values nest deeper than the protobuf runtime parses.

The runtime refuses a whole message nested past its recursion limit (100 messages for upb: an
attribute `kvlist` about 30 levels deep), where OTLP/JSON keeps the span and cuts the value at
`MAX_DEPTH` levels (docs/otlp-mapping.md, 'Decoding'). So when a body fails to parse, it is
re-encoded here, guided by the message descriptors: an AnyValue `MAX_DEPTH` levels down that
holds an array or a key-value list becomes the string `TOO_DEEP`, as the JSON reader makes it,
and unknown fields are left out. What comes out nests at most a fixed depth (OTLP's messages
nest only through AnyValue), so it is parsed with the runtime's limit lifted; every parse takes
`PARSE_LOCK`, so no other body is ever parsed while the limit is lifted.
"""

from __future__ import annotations

import threading
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError as ProtobufDecodeError

from .records import MAX_DEPTH, TOO_DEEP

ANY_VALUE = "opentelemetry.proto.common.v1.AnyValue"
_NESTED = (5, 6)  # AnyValue.array_value, AnyValue.kvlist_value
_ONEOF = range(1, 8)  # AnyValue's value fields
PARSE_LOCK = threading.Lock()


class WireError(ValueError):
    """The bytes are not protobuf wire format."""


def parse(message: Any, body: bytes) -> Any:
    """`message.ParseFromString(body)`; a body nested too deep for the runtime is re-encoded
    with its deep values cut (`cut_deep_values`) and parsed again. Raises the runtime's error
    when it still fails, or when nothing was cut."""
    with PARSE_LOCK:
        try:
            message.ParseFromString(body)
            return message
        except (ProtobufDecodeError, RuntimeError, ValueError) as exc:
            first = exc
        lift = _lifter()
        if lift is None:
            raise first
        try:
            cut = cut_deep_values(body, message.DESCRIPTOR)
        except WireError:
            raise first from None
        if cut is None:
            raise first
        message.Clear()
        lift(True)
        try:
            message.ParseFromString(cut)
        finally:
            lift(False)
        return message


def _lifter() -> Any:
    """The upb runtime's switch that lifts its recursion limit, where it has one."""
    try:
        from google._upb import _message  # type: ignore[attr-defined]
    except ImportError:
        return None
    return getattr(_message, "SetAllowOversizeProtos", None)


def cut_deep_values(body: bytes, descriptor: Descriptor) -> bytes | None:
    """`body` re-encoded with AnyValues at depth `MAX_DEPTH` or more that hold an array or a
    key-value list replaced by `TOO_DEEP`, unknown fields left out; None when nothing was cut.
    `WireError` when the bytes are not wire format."""
    state = {"cut": 0}
    out = _message(memoryview(body), descriptor, 0, state)
    return out if state["cut"] else None


def _varint(data: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise WireError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _fields(data: memoryview) -> list[tuple[int, int, int, int, int]]:
    """(number, wire type, start of the field, start of its value, end) of each field."""
    out = []
    pos = 0
    while pos < len(data):
        start = pos
        key, pos = _varint(data, pos)
        number, wire_type = key >> 3, key & 7
        value_start = pos
        if wire_type == 0:
            _, pos = _varint(data, pos)
        elif wire_type == 1:
            pos += 8
        elif wire_type == 5:
            pos += 4
        elif wire_type == 2:
            length, pos = _varint(data, pos)
            value_start = pos
            pos += length
        elif wire_type == 3:
            pos = _skip_group(data, pos)
        else:
            raise WireError(f"unexpected wire type {wire_type}")
        if pos > len(data) or number == 0:
            raise WireError("truncated field")
        out.append((number, wire_type, start, value_start, pos))
    return out


def _skip_group(data: memoryview, pos: int) -> int:
    """The end of a group (an unknown field: left out), counted, not recursed into."""
    depth = 1
    while depth:
        key, pos = _varint(data, pos)
        wire_type = key & 7
        if wire_type == 0:
            _, pos = _varint(data, pos)
        elif wire_type == 1:
            pos += 8
        elif wire_type == 5:
            pos += 4
        elif wire_type == 2:
            length, pos = _varint(data, pos)
            pos += length
        elif wire_type == 3:
            depth += 1
        elif wire_type == 4:
            depth -= 1
        else:
            raise WireError(f"unexpected wire type {wire_type}")
        if pos > len(data):
            raise WireError("truncated group")
    return pos


def _message(data: memoryview, descriptor: Descriptor, depth: int, state: dict) -> bytes:
    fields = _fields(data)
    if descriptor.full_name == ANY_VALUE:
        last = [number for number, *_ in fields if number in _ONEOF]
        if depth >= MAX_DEPTH and last and last[-1] in _NESTED:
            state["cut"] += 1
            text = TOO_DEEP.encode()
            return b"\x0a" + _encode_varint(len(text)) + text  # string_value
    out = bytearray()
    for number, wire_type, start, value_start, end in fields:
        field = descriptor.fields_by_number.get(number)
        if field is None or wire_type in (3, 4):
            continue  # unknown: the readers never look at it
        if wire_type == 2 and field.type == FieldDescriptor.TYPE_MESSAGE:
            inner_depth = depth + 1 if descriptor.full_name == ANY_VALUE else depth
            inner = _message(data[value_start:end], field.message_type, inner_depth, state)
            out += _encode_varint(number << 3 | 2) + _encode_varint(len(inner)) + inner
        else:
            out += data[start:end]
    return bytes(out)
