"""torch threads per process: `serve --with-worker` shares the cores instead of oversubscribing them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cli.serve import settings_env, threads_for
from core.modelload import cpu_cores, share_threads
from core.settings import Settings

REPO = Path(__file__).resolve().parents[1]


def test_share_gives_every_process_at_least_one_core() -> None:
    cores = cpu_cores()
    assert share_threads(1) == cores
    assert share_threads(cores * 4) == 1
    assert share_threads(2) == max(1, cores // 2)


def test_serve_with_worker_passes_the_share_to_its_workers(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, judge_concurrency=2)
    shared = threads_for(settings, with_worker=True)
    assert shared.torch_threads == share_threads(4)  # engine, trainer and two judge tasks
    assert settings_env(shared)["LEARNPROXY_TORCH_THREADS"] == str(shared.torch_threads)
    assert threads_for(settings, with_worker=False).torch_threads == 0  # alone, torch's default


def test_an_explicit_thread_count_wins(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, torch_threads=3)
    assert threads_for(settings, with_worker=True).torch_threads == 3


def test_set_torch_threads_limits_the_process_and_its_threads() -> None:
    # In a child process: the test process keeps its own thread count.
    code = (
        "import threading, torch\n"
        "from core.modelload import set_torch_threads\n"
        "set_torch_threads(1)\n"
        "print(torch.get_num_threads())\n"
        "seen = []\n"
        "t = threading.Thread(target=lambda: seen.append(torch.get_num_threads())); t.start(); t.join()\n"
        "print(seen[0])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                         check=True)
    assert out.stdout.split() == ["1", "1"]
