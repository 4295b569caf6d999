"""Export turns as a training dataset: JSON Lines or Parquet, one record per turn.

Rows are read in batches by keyset pagination on the turn id (never the whole DB in memory), and
repeated blobs (the system prompt, the tools) are read once per batch.

JSON Lines keeps every field as its natural JSON value. Parquet needs one fixed column type, so the
free-form fields (`messages`, `tools`, `tool_calls`, `next_state`, `params`, `advantage`) are JSON
strings there; everything else is typed. Both load with `datasets.load_dataset`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload, sessionmaker

from core.blobs import load_ids, load_json_many
from core.models import AdapterVersion, Turn
from core.tokens import unpack_floats, unpack_ids
from review.filters import TurnFilters
from review.queries import iso

BATCH_SIZE = 256
JSON_STRING_FIELDS = ("messages", "tools", "tool_calls", "next_state", "params", "advantage")

_VOTE = pa.struct(
    [
        ("kind", pa.string()),
        ("index", pa.int32()),
        ("score", pa.int8()),
        ("hint", pa.string()),
        ("raw_text", pa.string()),
        ("judge_model", pa.string()),
        ("template_name", pa.string()),
        ("template_version", pa.string()),
    ]
)
_LABEL = pa.struct(
    [("value", pa.int8()), ("hint", pa.string()), ("author", pa.string()), ("created_at", pa.string())]
)
PARQUET_SCHEMA = pa.schema(
    [
        ("turn_id", pa.int64()),
        ("session_id", pa.string()),
        ("turn_index", pa.int32()),
        ("turn_type", pa.string()),
        ("status", pa.string()),
        ("created_at", pa.string()),
        ("model", pa.string()),
        ("messages", pa.string()),
        ("tools", pa.string()),
        ("params", pa.string()),
        ("response", pa.string()),
        ("tool_calls", pa.string()),
        ("prompt_token_ids", pa.list_(pa.int32())),
        ("response_token_ids", pa.list_(pa.int32())),
        ("response_logprobs", pa.list_(pa.float32())),
        ("next_state", pa.string()),
        ("adapter_version", pa.int32()),
        ("adapter_name", pa.string()),
        ("finish_reason", pa.string()),
        ("error", pa.string()),
        ("score", pa.int8()),
        ("score_source", pa.string()),
        ("score_reason", pa.string()),
        ("votes", pa.list_(_VOTE)),
        ("hint", pa.string()),
        ("hint_source", pa.string()),
        ("label", _LABEL),
        ("advantage", pa.string()),
        ("trained_version", pa.int32()),
    ]
)


def export_rows(
    session_factory: sessionmaker[Session], filters: TurnFilters, *, batch_size: int = BATCH_SIZE
) -> Iterator[dict[str, Any]]:
    """Every turn matching `filters`, oldest id first, as a JSON-ready dict."""
    last_id = 0
    while True:
        with session_factory() as db:
            stmt = filters.apply(select(Turn), dialect=db.get_bind().dialect.name)
            turns = db.scalars(
                stmt.where(Turn.id > last_id)
                .order_by(Turn.id)
                .limit(batch_size)
                .options(selectinload(Turn.votes), selectinload(Turn.labels))
            ).all()
            if not turns:
                return
            rows = _batch_rows(db, list(turns))
        yield from rows
        last_id = turns[-1].id


def _batch_rows(db: Session, turns: list[Turn]) -> list[dict[str, Any]]:
    hashes = sorted({h for t in turns for h in t.message_refs} | {t.tools_ref for t in turns if t.tools_ref})
    blobs = dict(zip(hashes, load_json_many(db, hashes), strict=True))
    version_ids = {t.adapter_version_id for t in turns if t.adapter_version_id is not None}
    names = (
        dict(
            db.execute(
                select(AdapterVersion.id, AdapterVersion.name).where(AdapterVersion.id.in_(version_ids))
            ).all()
        )
        if version_ids
        else {}
    )
    return [_row(db, t, blobs, names) for t in turns]


def _row(db: Session, t: Turn, blobs: dict[str, Any], names: dict[int, str]) -> dict[str, Any]:
    newest = max(t.labels, key=lambda lab: lab.id) if t.labels else None
    return {
        "turn_id": t.id,
        "session_id": t.session_id,
        "turn_index": t.turn_index,
        "turn_type": t.turn_type,
        "status": t.status,
        "created_at": iso(t.created_at),
        "model": t.model,
        "messages": [blobs[h] for h in t.message_refs],
        "tools": blobs[t.tools_ref] if t.tools_ref else None,
        "params": t.params or {},
        "response": t.response_text,
        "tool_calls": t.tool_calls,
        "prompt_token_ids": load_ids(db, t.prompt_token_refs),
        "response_token_ids": unpack_ids(t.response_token_ids),
        "response_logprobs": _finite(unpack_floats(t.response_logprobs)),
        "next_state": t.next_state,
        "adapter_version": t.adapter_version_id,
        "adapter_name": names.get(t.adapter_version_id) if t.adapter_version_id is not None else None,
        "finish_reason": t.finish_reason,
        "error": t.error,
        "score": t.score,
        "score_source": t.score_source,
        "score_reason": t.score_reason,
        "votes": [
            {
                "kind": v.kind,
                "index": v.vote_index,
                "score": v.score,
                "hint": v.hint,
                "raw_text": v.raw_text,
                "judge_model": v.judge_model,
                "template_name": v.template_name,
                "template_version": v.template_version,
            }
            for v in t.votes
        ],
        "hint": t.hint,
        "hint_source": t.hint_source,
        "label": {
            "value": newest.value,
            "hint": newest.hint,
            "author": newest.author,
            "created_at": iso(newest.created_at),
        }
        if newest
        else None,
        "advantage": t.advantage,
        "trained_version": t.trained_version_id,
    }


def _finite(values: list[float]) -> list[float | None]:
    # JSON has no -inf; a logprob that underflowed is exported as null rather than invalid JSON.
    return [v if math.isfinite(v) else None for v in values]


def write_jsonl(rows: Iterator[dict[str, Any]], out: IO[str]) -> int:
    """Write one JSON object per line; returns the number of rows."""
    n = 0
    for row in rows:
        out.write(json.dumps(row, ensure_ascii=False, allow_nan=False))
        out.write("\n")
        n += 1
    return n


def write_parquet(rows: Iterator[dict[str, Any]], path: Path, *, batch_size: int = BATCH_SIZE) -> int:
    """Write rows to one Parquet file, one row group per batch; returns the number of rows."""
    n = 0
    with pq.ParquetWriter(path, PARQUET_SCHEMA) as writer:
        batch: list[dict[str, Any]] = []
        for row in rows:
            batch.append(_parquet_row(row))
            if len(batch) >= batch_size:
                writer.write_table(pa.Table.from_pylist(batch, schema=PARQUET_SCHEMA))
                n += len(batch)
                batch = []
        if batch or n == 0:
            writer.write_table(pa.Table.from_pylist(batch, schema=PARQUET_SCHEMA))
            n += len(batch)
    return n


def _parquet_row(row: dict[str, Any]) -> dict[str, Any]:
    out = dict(row)
    for key in JSON_STRING_FIELDS:
        out[key] = json.dumps(row[key], ensure_ascii=False) if row[key] is not None else None
    return out
