"""`learnproxy bench NAME --quick`: the flag after the name counts, and a stray argument is refused."""

from __future__ import annotations

import pytest

from cli.bench import DOC
from cli.main import build_parser, main


def test_quick_after_the_name_reaches_the_benchmark_as_rest() -> None:
    # argparse hands everything after the name to `rest` (it is `bench learn`'s argument list),
    # which is why cli.bench.run reads --quick from there too
    args = build_parser().parse_args(["bench", "engine", "--quick"])
    assert (args.which, args.quick, args.rest) == ("engine", False, ["--quick"])


def test_an_unknown_argument_is_refused_before_anything_runs(capsys: pytest.CaptureFixture[str]) -> None:
    before = DOC.read_text() if DOC.exists() else None
    assert main(["bench", "engine", "--quick", "--trials", "3"]) == 2
    assert "unknown arguments for `bench engine`: --trials 3" in capsys.readouterr().err
    assert (DOC.read_text() if DOC.exists() else None) == before  # no section was written
