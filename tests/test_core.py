"""The shared package: token packing, content-addressed blobs and settings."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from core.blobs import TOKEN_CHUNK, ids_rows, insert_blobs, json_row, load_ids, load_json
from core.models import Blob
from core.settings import Settings
from core.tokens import pack_floats, pack_ids, unpack_floats, unpack_ids


def test_token_arrays_round_trip_at_four_bytes_each() -> None:
    ids = [0, 1, 49151, 2**31 - 1]
    assert unpack_ids(pack_ids(ids)) == ids
    assert len(pack_ids(ids)) == 16
    lps = [-0.5, -12.25, 0.0]
    assert unpack_floats(pack_floats(lps)) == lps
    assert unpack_ids(b"") == [] and unpack_ids(None) == []


def test_blobs_store_shared_prefixes_once(db) -> None:
    prefix = list(range(TOKEN_CHUNK * 3))
    a, b = prefix + [7, 8], prefix + [9]
    rows_a, rows_b = ids_rows(a), ids_rows(b)
    insert_blobs(db, rows_a + [json_row({"role": "system", "content": "x"})])
    insert_blobs(db, rows_b + [json_row({"role": "system", "content": "x"})])
    db.commit()
    # three shared prefix chunks, two distinct tails, one message
    assert db.scalar(select(func.count()).select_from(Blob)) == 6
    assert load_ids(db, [r["hash"] for r in rows_b]) == b
    assert load_json(db, json_row({"content": "x", "role": "system"})["hash"]) == {"role": "system", "content": "x"}


def test_settings_read_prefixed_env(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("LEARNPROXY_API_KEYS", "k1, k2")
    monkeypatch.setenv("LEARNPROXY_PORT", "9001")
    s = Settings(data_dir=tmp_path)
    assert s.api_keys == ["k1", "k2"]
    assert s.port == 9001
    assert s.db_url == f"sqlite:///{tmp_path / 'learnproxy.db'}"
    assert s.judge_base_url == "http://127.0.0.1:9001/v1"
