"""Converting the bundled default model once, when several processes start on a fresh data dir."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from filelock import FileLock

from core.modelload import resolve_model_path
from core.settings import DEFAULT_MODEL


def test_a_process_that_finds_a_conversion_under_way_waits_for_it_and_does_not_convert_again(
    tmp_path: Path,
) -> None:
    target = tmp_path / DEFAULT_MODEL
    found: list[str] = []
    with FileLock(str(tmp_path / f".{DEFAULT_MODEL}.lock")):  # another process is converting
        waiter = threading.Thread(target=lambda: found.append(resolve_model_path(DEFAULT_MODEL, tmp_path)),
                                  daemon=True)
        waiter.start()
        time.sleep(0.5)
        assert waiter.is_alive() and not found  # it waits on the lock rather than writing beside it
        target.mkdir()
        (target / "config.json").write_text("{}")  # the other process's folder lands
    started = time.monotonic()
    waiter.join(timeout=30)
    # it found the finished folder under the lock: a second conversion would take a minute and add a .partial
    assert found == [str(target)] and time.monotonic() - started < 5
    assert not target.with_name(DEFAULT_MODEL + ".partial").exists()
