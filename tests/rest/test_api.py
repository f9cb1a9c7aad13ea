"""The admin REST API through httpx against a real uvicorn server."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import httpx
import pytest
from tidegate.core.controller.api import RetentionPolicy, RetentionType, qualified_segment_name
from tidegate.gateway.admin.rest import bound_port, create_app, serve_rest, stop_rest

from tests.rest.conftest import Rest

STREAMS = "/v1/scopes/sc/streams"


async def _ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json() if response.content else None


def _error(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"message"} and isinstance(body["message"], str) and body["message"]
    return str(body["message"])


async def _stream(rest: Rest, name: str = "s", **body: Any) -> dict[str, Any]:
    if (await rest.client.post("/v1/scopes", json={"scopeName": "sc"})).status_code not in (201, 409):
        raise AssertionError("cannot create scope sc")
    result: dict[str, Any] = await _ok(
        await rest.client.post(STREAMS, json={"streamName": name, **body}), 201
    )
    return result


async def test_health_follows_ready(rest: Rest) -> None:
    assert await _ok(await rest.client.get("/health")) == {"status": "ready"}
    rest.ready[0] = False
    r = await rest.client.get("/health")
    assert r.status_code == 503 and r.json() == {"status": "starting"}
    _error(await rest.client.get("/v1/scopes"), 503)
    rest.ready[0] = True
    await _ok(await rest.client.get("/v1/scopes"))


async def test_scopes_lifecycle(rest: Rest) -> None:
    c = rest.client
    assert await _ok(await c.get("/v1/scopes")) == {"scopes": []}
    assert await _ok(await c.post("/v1/scopes", json={"scopeName": "b"}), 201) == {"scopeName": "b"}
    await _ok(await c.post("/v1/scopes", json={"scopeName": "a"}), 201)
    _error(await c.post("/v1/scopes", json={"scopeName": "a"}), 409)
    listed = await _ok(await c.get("/v1/scopes"))
    assert listed == {"scopes": [{"scopeName": "a"}, {"scopeName": "b"}]}
    await _ok(await c.post("/v1/scopes/a/streams", json={"streamName": "s"}), 201)
    _error(await c.delete("/v1/scopes/a"), 409)  # not empty
    await _ok(await c.delete("/v1/scopes/b"), 204)
    _error(await c.delete("/v1/scopes/b"), 404)
    assert await _ok(await c.get("/v1/scopes")) == {"scopes": [{"scopeName": "a"}]}


async def test_get_scope(rest: Rest) -> None:
    c = rest.client
    _error(await c.get("/v1/scopes/a"), 404)
    await _ok(await c.post("/v1/scopes", json={"scopeName": "a"}), 201)
    assert await _ok(await c.get("/v1/scopes/a")) == {"scopeName": "a"}
    assert "scope b" in _error(await c.get("/v1/scopes/b"), 404)
    _error(await c.get("/v1/scopes/bad name!"), 400)
    await _ok(await c.delete("/v1/scopes/a"), 204)
    _error(await c.get("/v1/scopes/a"), 404)


async def test_stream_create_get_list(rest: Rest) -> None:
    created = await _stream(
        rest,
        "orders",
        scalingPolicy={
            "type": "BY_RATE_IN_KBYTES_PER_SEC",
            "targetRate": 100,
            "scaleFactor": 3,
            "minSegments": 4,
        },
        retentionPolicy={"type": "LIMITED_DAYS", "value": 7},
        tags=["blue", "green"],
    )
    assert created["scopeName"] == "sc" and created["streamName"] == "orders"
    assert created["scalingPolicy"] == {
        "type": "BY_RATE_IN_KBYTES_PER_SEC",
        "targetRate": 100,
        "scaleFactor": 3,
        "minSegments": 4,
    }
    assert created["retentionPolicy"] == {"type": "LIMITED_DAYS", "value": 7}
    assert created["tags"] == ["blue", "green"]
    assert created["streamState"] == "ACTIVE"
    info = await rest.controller.get_stream("sc", "orders")
    assert info.config.retention is not None and info.config.retention.value == 7 * 86_400_000

    await _stream(rest, "plain", retentionPolicy={"type": "LIMITED_SIZE_MB", "value": 10})
    got = await _ok(await rest.client.get(f"{STREAMS}/plain"))
    assert got["retentionPolicy"] == {"type": "LIMITED_SIZE_MB", "value": 10}
    assert got["scalingPolicy"]["type"] == "FIXED_NUM_SEGMENTS"
    assert got["tags"] == []

    listed = await _ok(await rest.client.get(STREAMS))
    assert [s["streamName"] for s in listed["streams"]] == ["orders", "plain"]
    tagged = await _ok(await rest.client.get(STREAMS, params={"tag": "green"}))
    assert [s["streamName"] for s in tagged["streams"]] == ["orders"]
    _error(await rest.client.post(STREAMS, json={"streamName": "orders"}), 409)


async def test_missing_scope_and_stream_are_404(rest: Rest) -> None:
    c = rest.client
    _error(await c.get("/v1/scopes/nope/streams"), 404)
    _error(await c.post("/v1/scopes/nope/streams", json={"streamName": "s"}), 404)
    await _ok(await c.post("/v1/scopes", json={"scopeName": "sc"}), 201)
    for method, suffix, body in [
        ("GET", "", None),
        ("PUT", "", {"tags": ["x"]}),
        ("DELETE", "", None),
        ("PUT", "/state", {"streamState": "SEALED"}),
        ("GET", "/segments", None),
        ("GET", "/segments/0/successors", None),
        ("GET", "/scaling-events", None),
        ("POST", "/scale", {"sealedSegments": [0], "newKeyRanges": [[0, 0.5], [0.5, 1]]}),
        ("POST", "/truncate", {"streamCut": {"0": 0}}),
    ]:
        r = await c.request(method, f"{STREAMS}/nope{suffix}", json=body)
        _error(r, 404)


async def test_update_keeps_what_is_left_out(rest: Rest) -> None:
    await _stream(
        rest,
        retentionPolicy={"type": "LIMITED_SIZE_MB", "value": 5},
        tags=["a"],
    )
    updated = await _ok(
        await rest.client.put(
            f"{STREAMS}/s", json={"scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": 2}}
        )
    )
    assert updated["scalingPolicy"]["minSegments"] == 2
    assert updated["retentionPolicy"] == {"type": "LIMITED_SIZE_MB", "value": 5}
    assert updated["tags"] == ["a"]
    updated = await _ok(
        await rest.client.put(f"{STREAMS}/s", json={"retentionPolicy": None, "tags": ["b", "c"]})
    )
    assert updated["retentionPolicy"] is None and updated["tags"] == ["b", "c"]
    assert updated["scalingPolicy"]["minSegments"] == 2
    got = await _ok(await rest.client.get(f"{STREAMS}/s"))
    assert got == updated


async def test_seal_then_delete(rest: Rest) -> None:
    await _stream(rest)
    _error(await rest.client.delete(f"{STREAMS}/s"), 409)  # not sealed
    sealed = await rest.client.put(f"{STREAMS}/s/state", json={"streamState": "SEALED"})
    assert await _ok(sealed) == {"streamState": "SEALED"}
    assert (await _ok(await rest.client.get(f"{STREAMS}/s")))["streamState"] == "SEALED"
    scale = {"sealedSegments": [0], "newKeyRanges": [[0, 0.5], [0.5, 1]]}
    _error(await rest.client.post(f"{STREAMS}/s/scale", json=scale), 409)
    await _ok(await rest.client.delete(f"{STREAMS}/s"), 204)
    _error(await rest.client.get(f"{STREAMS}/s"), 404)


async def test_segments_scale_successors_and_history(rest: Rest) -> None:
    await _stream(rest, scalingPolicy={"type": "FIXED_NUM_SEGMENTS", "minSegments": 2})
    segments = (await _ok(await rest.client.get(f"{STREAMS}/s/segments")))["segments"]
    assert [(s["number"], s["epoch"], s["keyStart"], s["keyEnd"]) for s in segments] == [
        (0, 0, 0.0, 0.5),
        (1, 0, 0.5, 1.0),
    ]
    assert [s["id"] for s in segments] == [0, 1]

    scaled = await _ok(
        await rest.client.post(
            f"{STREAMS}/s/scale",
            json={"sealedSegments": [1], "newKeyRanges": [[0.5, 0.75], [0.75, 1.0]]},
        )
    )
    assert scaled["epoch"] == 1
    new = {(s["keyStart"], s["keyEnd"]): s for s in scaled["segmentList"]}
    assert set(new) == {(0.0, 0.5), (0.5, 0.75), (0.75, 1.0)}
    upper = new[(0.5, 0.75)]
    assert upper["epoch"] == 1 and upper["id"] == (1 << 32) | upper["number"]

    current = (await _ok(await rest.client.get(f"{STREAMS}/s/segments")))["segments"]
    assert sorted((s["keyStart"], s["keyEnd"]) for s in current) == sorted(new)

    successors = await _ok(await rest.client.get(f"{STREAMS}/s/segments/1/successors"))
    got = [(e["segment"]["keyStart"], e["segment"]["keyEnd"], e["predecessors"]) for e in successors["successors"]]
    assert got == [(0.5, 0.75, [1]), (0.75, 1.0, [1])]
    assert (await _ok(await rest.client.get(f"{STREAMS}/s/segments/0/successors"))) == {
        "successors": []
    }

    events = (await _ok(await rest.client.get(f"{STREAMS}/s/scaling-events")))["scalingEvents"]
    assert [e["epoch"] for e in events] == [0, 1]
    assert len(events[0]["segmentList"]) == 2 and len(events[1]["segmentList"]) == 3
    t1 = events[1]["timestamp"]
    after = await rest.client.get(f"{STREAMS}/s/scaling-events", params={"from": t1})
    assert [e["epoch"] for e in (await _ok(after))["scalingEvents"]] == [1]
    before = await rest.client.get(f"{STREAMS}/s/scaling-events", params={"to": t1 - 1})
    assert [e["epoch"] for e in (await _ok(before))["scalingEvents"]] == [0]


async def test_bad_scales_are_rejected(rest: Rest) -> None:
    await _stream(rest, scalingPolicy={"type": "FIXED_NUM_SEGMENTS", "minSegments": 2})
    url = f"{STREAMS}/s/scale"
    # Ranges that do not cover the sealed segment exactly.
    _error(await rest.client.post(url, json={"sealedSegments": [1], "newKeyRanges": [[0.5, 0.9]]}), 400)
    _error(
        await rest.client.post(
            url, json={"sealedSegments": [1], "newKeyRanges": [[0.4, 0.8], [0.8, 1.0]]}
        ),
        400,
    )
    # Empty, reversed and out-of-range key ranges, and no segments at all.
    for ranges in ([[0.7, 0.7]], [[0.9, 0.5]], [[0.5, 1.5]], [[-0.1, 1.0]]):
        _error(await rest.client.post(url, json={"sealedSegments": [1], "newKeyRanges": ranges}), 400)
    _error(await rest.client.post(url, json={"sealedSegments": [], "newKeyRanges": [[0, 1]]}), 400)
    # A segment that is not in the current epoch any more: conflicting with the last scale.
    await _ok(
        await rest.client.post(
            url, json={"sealedSegments": [1], "newKeyRanges": [[0.5, 0.75], [0.75, 1.0]]}
        )
    )
    r = await rest.client.post(url, json={"sealedSegments": [1], "newKeyRanges": [[0.5, 1.0]]})
    assert r.status_code in (400, 409), r.text
    _error(r, r.status_code)
    # Above the configured segment bound (16 in these tests).
    many = [[i / 20, (i + 1) / 20] for i in range(20)]
    message = _error(await rest.client.post(url, json={"sealedSegments": [0], "newKeyRanges": many}), 400)
    assert "limit" in message


async def test_truncate(rest: Rest) -> None:
    await _stream(rest)
    scaled = await _ok(
        await rest.client.post(
            f"{STREAMS}/s/scale", json={"sealedSegments": [0], "newKeyRanges": [[0, 0.5], [0.5, 1]]}
        )
    )
    ids = sorted(s["id"] for s in scaled["segmentList"])
    cut = {str(i): 0 for i in ids}
    head = await _ok(await rest.client.post(f"{STREAMS}/s/truncate", json={"streamCut": cut}))
    assert head == {"streamCut": cut}
    # Backwards, to before the scale.
    r = await rest.client.post(f"{STREAMS}/s/truncate", json={"streamCut": {"0": 0}})
    assert r.status_code in (400, 409), r.text
    _error(r, r.status_code)
    for bad in ({}, {"x": 0}, {"0": -1}, {"-1": 0}):
        _error(await rest.client.post(f"{STREAMS}/s/truncate", json={"streamCut": bad}), 400)


async def test_truncate_within_a_segment(rest: Rest) -> None:
    await _stream(rest)
    await rest.store.append(qualified_segment_name("sc", "s", 0), b"x" * 100)
    head = await _ok(await rest.client.post(f"{STREAMS}/s/truncate", json={"streamCut": {"0": 40}}))
    assert head == {"streamCut": {"0": 40}}
    r = await rest.client.post(f"{STREAMS}/s/truncate", json={"streamCut": {"0": 10}})
    _error(r, 409)


async def test_invalid_input_is_400_with_a_message(rest: Rest) -> None:
    c = rest.client
    await _ok(await c.post("/v1/scopes", json={"scopeName": "sc"}), 201)
    bad_bodies: list[tuple[str, str, Any]] = [
        ("POST", "/v1/scopes", {"scopeName": ""}),
        ("POST", "/v1/scopes", {"scopeName": "a/b"}),
        ("POST", "/v1/scopes", {"scopeName": "x" * 256}),
        ("POST", "/v1/scopes", {"scope": "a"}),
        ("POST", "/v1/scopes", [1, 2]),
        ("POST", STREAMS, {"streamName": "s", "scalingPolicy": {"type": "BY_MOOD"}}),
        ("POST", STREAMS, {"streamName": "s", "scalingPolicy": {"minSegments": 0}}),
        ("POST", STREAMS, {"streamName": "s", "scalingPolicy": {"minSegments": 17}}),
        ("POST", STREAMS, {"streamName": "s", "scalingPolicy": {"targetRate": -1}}),
        ("POST", STREAMS, {"streamName": "s", "retentionPolicy": {"type": "LIMITED_DAYS"}}),
        ("POST", STREAMS, {"streamName": "s", "retentionPolicy": {"type": "LIMITED_DAYS", "value": 0}}),
        ("POST", STREAMS, {"streamName": "s", "retentionPolicy": {"type": "LIMITED_DAYS", "value": 1e300}}),
        ("POST", STREAMS, {"streamName": "s", "retentionPolicy": {
            "type": "LIMITED_SIZE_MB", "value": 1, "maxSizeMB": 1}}),
        ("POST", STREAMS, {"streamName": "s", "retentionPolicy": {
            "type": "LIMITED_DAYS", "value": 1, "maxSizeMB": 0}}),
        ("POST", STREAMS, {"streamName": "s", "tags": [""]}),
        ("POST", STREAMS, {"streamName": "s", "extra": 1}),
    ]
    for method, url, body in bad_bodies:
        _error(await c.request(method, url, json=body), 400)
    _error(await c.post("/v1/scopes", content=b"{not json", headers={"content-type": "application/json"}), 400)
    _error(await c.post("/v1/scopes"), 400)
    await _ok(await c.post(STREAMS, json={"streamName": "s"}), 201)
    _error(await c.put(f"{STREAMS}/s/state", json={"streamState": "ACTIVE"}), 400)
    _error(await c.get(f"{STREAMS}/s/segments/-1/successors"), 400)
    _error(await c.get(f"{STREAMS}/s/segments/x/successors"), 400)
    _error(await c.get(f"{STREAMS}/s/scaling-events", params={"from": "yesterday"}), 400)
    _error(await c.get("/v1/scopes/bad name!/streams"), 400)
    assert (await _ok(await c.get(f"{STREAMS}/s")))["streamState"] == "ACTIVE"


async def test_unknown_routes_and_methods_answer_a_message(rest: Rest) -> None:
    _error(await rest.client.get("/v2/nothing"), 404)
    _error(await rest.client.patch("/v1/scopes"), 405)


async def test_oversized_body_is_413(rest: Rest) -> None:
    body = {"scopeName": "a", "pad": "x" * (70 * 1024)}
    _error(await rest.client.post("/v1/scopes", json=body), 413)

    async def chunks() -> Any:
        for _ in range(70):
            yield b" " * 1024

    r = await rest.client.post(
        "/v1/scopes", content=chunks(), headers={"content-type": "application/json"}
    )
    _error(r, 413)
    assert await _ok(await rest.client.get("/v1/scopes")) == {"scopes": []}


async def test_openapi_lists_exactly_the_api(rest: Rest) -> None:
    spec = await _ok(await rest.client.get("/openapi.json"))
    stream = "/v1/scopes/{scope}/streams/{stream}"
    expected = {
        "/health": {"get"},
        "/v1/scopes": {"get", "post"},
        "/v1/scopes/{scope}": {"get", "delete"},
        "/v1/scopes/{scope}/streams": {"get", "post"},
        stream: {"get", "put", "delete"},
        f"{stream}/state": {"put"},
        f"{stream}/segments": {"get"},
        f"{stream}/segments/{{segment_id}}/successors": {"get"},
        f"{stream}/scaling-events": {"get"},
        f"{stream}/scale": {"post"},
        f"{stream}/truncate": {"post"},
    }
    assert {path: set(ops) for path, ops in spec["paths"].items()} == expected
    schemas = spec["components"]["schemas"]
    assert set(schemas["CreateStreamRequest"]["properties"]) == {
        "streamName",
        "scalingPolicy",
        "retentionPolicy",
        "tags",
    }
    assert set(schemas["ScalingConfig"]["properties"]) == {
        "type",
        "targetRate",
        "scaleFactor",
        "minSegments",
    }
    assert set(schemas["ScaleRequest"]["properties"]) == {"sealedSegments", "newKeyRanges"}
    # The configured bound (16 here) is in the schema, not only in the code.
    assert schemas["ScalingConfig"]["properties"]["minSegments"]["maximum"] == 16
    assert schemas["ScaleRequest"]["properties"]["newKeyRanges"]["maxItems"] == 16


async def test_retention_units_round_trip(rest: Rest) -> None:
    created = await _stream(rest, retentionPolicy={"type": "LIMITED_DAYS", "value": 0.5})
    assert created["retentionPolicy"] == {"type": "LIMITED_DAYS", "value": 0.5}
    info = await rest.controller.get_stream("sc", "s")
    assert info.config.retention is not None and info.config.retention.value == 43_200_000
    # A retention set elsewhere in ms that is no whole number of days shows as a fraction.
    await rest.controller.update_stream(
        "sc", "s", replace(info.config, retention=RetentionPolicy(RetentionType.TIME, 1_000))
    )
    got = await _ok(await rest.client.get(f"{STREAMS}/s"))
    assert got["retentionPolicy"] == {"type": "LIMITED_DAYS", "value": 1_000 / 86_400_000}
    updated = await _ok(
        await rest.client.put(
            f"{STREAMS}/s", json={"retentionPolicy": {"type": "LIMITED_SIZE_MB", "value": 3}}
        )
    )
    assert updated["retentionPolicy"] == {"type": "LIMITED_SIZE_MB", "value": 3}
    info = await rest.controller.get_stream("sc", "s")
    assert info.config.retention == RetentionPolicy(RetentionType.SIZE, 3 << 20)
    # Both limits (a Kafka topic's retention.ms with retention.bytes): the size bound
    # shows, and an update that gives it keeps it.
    both = {"type": "LIMITED_DAYS", "value": 2, "maxSizeMB": 1.5}
    updated = await _ok(await rest.client.put(f"{STREAMS}/s", json={"retentionPolicy": both}))
    assert updated["retentionPolicy"] == both
    info = await rest.controller.get_stream("sc", "s")
    assert info.config.retention == RetentionPolicy(RetentionType.TIME, 2 * 86_400_000, 3 << 19)


async def test_serve_rest_binds_or_raises_and_stops(rest: Rest) -> None:
    app = create_app(rest.controller)
    server, task = await serve_rest(app, "127.0.0.1", 0)
    port = bound_port(server)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        assert (await client.get("/health")).status_code == 200
        with pytest.raises(OSError):
            await serve_rest(app, "127.0.0.1", port)
        await stop_rest(server, task)
        assert task.done() and task.exception() is None
        with pytest.raises(httpx.ConnectError):
            await client.get("/health")
