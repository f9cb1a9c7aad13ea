"""A StreamCut's text form, what ``GetStreamCut`` answers and ``start_stream_cut`` /
``end_stream_cut`` take: ``tgcut1:`` and the URL-safe base64 (unpadded) of the JSON
``{"scope": s, "stream": t, "cut": {"<segment id>": offset}}``. Like Pravega's
``StreamCut.asText()`` it names its stream, so a cut of another stream is refused."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping

PREFIX = "tgcut1:"


def to_text(scope: str, stream: str, cut: Mapping[int, int]) -> str:
    body = {"scope": scope, "stream": stream, "cut": {str(k): int(v) for k, v in sorted(cut.items())}}
    raw = json.dumps(body, separators=(",", ":")).encode()
    return PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def from_text(text: str) -> tuple[str, str, dict[int, int]]:
    """``(scope, stream, cut)``; raises ``ValueError`` saying what is wrong."""
    if not text.startswith(PREFIX):
        raise ValueError(f"a serialized stream cut starts with {PREFIX!r}")
    encoded = text[len(PREFIX):].strip()
    try:
        body = json.loads(base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise ValueError("the serialized stream cut is damaged (not base64 JSON)") from None
    ok = (
        isinstance(body, dict) and isinstance(body.get("scope"), str)
        and isinstance(body.get("stream"), str) and isinstance(body.get("cut"), dict)
        and all(k.isdigit() and isinstance(v, int) and not isinstance(v, bool) and v >= 0
                for k, v in body["cut"].items())
    )
    if not ok or not body["cut"]:
        raise ValueError("the serialized stream cut is damaged (no scope, stream or segments)")
    return body["scope"], body["stream"], {int(k): v for k, v in body["cut"].items()}
