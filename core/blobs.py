"""Content-addressed blob store: each distinct message, tool list or token chunk is stored once.

Prompt token ids are cut into fixed chunks from position 0, so turns that share a prefix (the
system prompt, the earlier history) share their leading chunks.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from core.models import Blob
from core.tokens import pack_ids, unpack_ids

TOKEN_CHUNK = 256


def canonical_json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def digest(kind: str, raw: bytes) -> str:
    return hashlib.sha256(kind.encode() + b"\0" + raw).hexdigest()


def json_row(obj: Any) -> dict[str, Any]:
    raw = canonical_json(obj)
    return {"hash": digest("json", raw), "kind": "json", "size": len(raw), "data": zlib.compress(raw)}


def ids_rows(ids: Sequence[int]) -> list[dict[str, Any]]:
    rows = []
    for start in range(0, len(ids), TOKEN_CHUNK):
        raw = pack_ids(ids[start : start + TOKEN_CHUNK])
        rows.append({"hash": digest("ids", raw), "kind": "ids", "size": len(raw), "data": zlib.compress(raw)})
    return rows


def insert_blobs(session: Session, rows: Iterable[dict[str, Any]]) -> None:
    """Insert rows, skipping hashes already stored (safe under concurrent writers)."""
    unique = list({r["hash"]: r for r in rows}.values())
    if not unique:
        return
    name = session.get_bind().dialect.name
    insert = pg_insert if name == "postgresql" else sqlite_insert
    for start in range(0, len(unique), 500):  # stay under the drivers' bound-parameter limits
        stmt = insert(Blob).values(unique[start : start + 500])
        session.execute(stmt.on_conflict_do_nothing(index_elements=["hash"]))


def _load(session: Session, hashes: Sequence[str]) -> dict[str, bytes]:
    wanted = set(hashes)
    found = {b.hash: zlib.decompress(b.data) for b in session.scalars(select(Blob).where(Blob.hash.in_(wanted)))}
    missing = wanted - found.keys()
    if missing:
        raise KeyError(f"missing blobs: {sorted(missing)[:3]}")
    return found


def load_json_many(session: Session, hashes: Sequence[str]) -> list[Any]:
    found = _load(session, hashes)
    return [json.loads(found[h]) for h in hashes]


def load_json(session: Session, hash_: str) -> Any:
    return load_json_many(session, [hash_])[0]


def load_ids(session: Session, hashes: Sequence[str]) -> list[int]:
    found = _load(session, hashes)
    out: list[int] = []
    for h in hashes:
        out.extend(unpack_ids(found[h]))
    return out
