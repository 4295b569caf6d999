"""The deterministic signal stage: real tool-output shapes that must fire, and near misses that must not."""

from __future__ import annotations

import json
from typing import Any

import pytest

from judges.signals import detect


def tool(content: object) -> dict[str, object]:
    text = content if isinstance(content, str) else json.dumps(content)
    return {"role": "tool", "tool_call_id": "call_1", "content": text}


FIRES = [
    ({"error": "ENOENT: no such file or directory, open 'config.yml'"}, "error"),
    ({"error": {"code": 42703, "message": "column does not exist"}}, "error"),
    ([{"error": "rate limited"}], "error"),
    ({"isError": True, "content": [{"type": "text", "text": "Repository not found"}]}, "failure"),
    ({"success": False, "message": "quota exceeded"}, "failure"),
    ({"exit_code": 2, "stdout": "", "stderr": "No rule to make target"}, "exit_code=2"),
    ({"returncode": 127}, "returncode=127"),
    ({"status": 401, "body": "invalid_auth"}, "401"),
    ({"status_code": 502}, "502"),
    ("Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: bad", "traceback"),
    ("Process exited with code 1\nError: listen EADDRINUSE", "exit code 1"),
    ("command failed, exit status 128", "128"),
    ("HTTP/1.1 404 Not Found\ncontent-type: text/html", "404"),
    ("upstream returned 503 Service Unavailable", "503"),
    ("request failed: status code 500", "500"),
    ([{"type": "text", "text": "Traceback (most recent call last):\nKeyError: 'id'"}], "traceback"),
]

NEAR_MISSES = [
    "No errors found. 42 files checked.",
    "## Error handling\nErrors are returned as JSON objects. Retry on 503.",  # a status code in prose
    "src/app.py:12: # TODO: handle errors from the payment API",
    "Successfully installed requests-2.32.3\nexit code 0",
    {"error": None, "issues": [{"title": "500 error on login page"}]},
    {"error": "", "result": "ok"},
    {"exit_code": 0, "stdout": "All checks passed!"},
    {"status": "error-free", "count": 3},
    {"status": 200, "elapsed_ms": 143},
    "HTTP/1.1 200 OK",
    "Returned 404 rows in 0.3 s",
    "The error rate fell from 5% to 0.1% after the fix.",
    "Our HTTP client retries 429 responses politely.",
    '{"truncated json with "error": 1',
]


@pytest.mark.parametrize(("content", "reason_part"), FIRES)
def test_failure_shapes_fire_with_a_reason(content: object, reason_part: str) -> None:
    if isinstance(content, list) and content and isinstance(content[0], dict) and "type" in content[0]:
        message: dict[str, object] = {"role": "tool", "content": content}  # list content parts
    else:
        message = tool(content)
    signal = detect([message])
    assert signal is not None, content
    assert signal.score == -1
    assert reason_part in signal.reason


@pytest.mark.parametrize("content", NEAR_MISSES)
def test_near_misses_do_not_fire(content: object) -> None:
    assert detect([tool(content)]) is None


def test_user_prose_about_errors_does_not_fire_but_a_pasted_traceback_does() -> None:
    assert detect([{"role": "user", "content": "there's an error in the second paragraph"}]) is None
    assert detect([{"role": "user", "content": "HTTP 500 is what I expected to see, thanks"}]) is None
    pasted = "I ran it and got:\nTraceback (most recent call last):\n  File \"a.py\"\nNameError: x"
    signal = detect([{"role": "user", "content": pasted}])
    assert signal is not None and "traceback" in signal.reason


def test_first_failing_result_among_parallel_tool_results_is_reported() -> None:
    state: list[dict[str, Any]] = [
        tool("a.txt\nb.txt"), tool({"error": "permission denied"}), {"role": "user", "content": "ok"},
    ]
    signal = detect(state)
    assert signal is not None and "permission denied" in signal.reason
