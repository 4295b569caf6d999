"""Compact, portable token arrays: little-endian int32 ids and float32 logprobs as bytes.

The same bytes go into SQLite BLOB and Postgres BYTEA columns, so a turn reads back identically
from either database.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence


def _le(a: array) -> bytes:
    if sys.byteorder != "little":
        a = array(a.typecode, a)
        a.byteswap()
    return a.tobytes()


def _from_le(typecode: str, data: bytes | None) -> array:
    a = array(typecode)
    if data:
        a.frombytes(data)
        if sys.byteorder != "little":
            a.byteswap()
    return a


def pack_ids(ids: Sequence[int]) -> bytes:
    return _le(array("i", ids))


def unpack_ids(data: bytes | None) -> list[int]:
    return _from_le("i", data).tolist()


def pack_floats(values: Sequence[float]) -> bytes:
    return _le(array("f", values))


def unpack_floats(data: bytes | None) -> list[float]:
    return _from_le("f", data).tolist()
