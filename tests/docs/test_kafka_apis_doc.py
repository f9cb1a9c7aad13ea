"""``docs/kafka-apis.md`` lists every API a running ``tidegate serve`` advertises in
ApiVersions, with the same version range and Kafka's name, and nothing else; so a handler
added or a version raised without its line in the document fails here."""

from __future__ import annotations

import re
import socket
import struct

import tidegate.protocol  # noqa: F401  (loads kafka-python's schemas with their warning silenced)
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from tidegate.gateway.handlers import default_registry

from tests.clients.requests import Conn
from tests.clients.server import Tidegate
from tests.docs.examples import REPO

DOC = REPO / "docs" / "kafka-apis.md"
SECTION = "## Every API advertised"
#: ``| Name (key) | 3-12 | what it does |`` (a single version is written alone).
ROW = re.compile(r"^\| (\w+) \((\d+)\) \| (\d+)(?:-(\d+))? \| (.+) \|$")


def documented() -> dict[int, tuple[str, int, int]]:
    text = DOC.read_text()
    assert SECTION in text, f"{DOC} has no {SECTION!r} section"
    body = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    out: dict[int, tuple[str, int, int]] = {}
    for line in body.splitlines():
        if not line.startswith("| ") or line.startswith("| API") or line.startswith("|---"):
            continue
        m = ROW.match(line)
        assert m is not None, f"a row of {SECTION!r} is not 'Name (key) | versions | text': {line}"
        name, key, low, high, what = m.groups()
        assert what.strip(), f"no description for {name}"
        assert int(key) not in out, f"API key {key} listed twice"
        out[int(key)] = (name, int(low), int(high if high is not None else low))
    return out



def test_the_document_lists_exactly_what_api_versions_advertises(tidegate: Tidegate) -> None:
    conn = Conn(tidegate.port)
    try:
        resp = conn.call(ApiVersionsRequest(client_software_name="doc-check",
                                            client_software_version="1"), 3, ApiVersionsResponse)
    finally:
        conn.close()
    assert resp.error_code == 0, resp
    advertised = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    names = {api.spec.api_key: api.spec.name for api in default_registry().apis()}
    doc = documented()
    missing = sorted(set(advertised) - set(doc))
    extra = sorted(set(doc) - set(advertised))
    assert not missing, f"advertised but not in {DOC.name}: {[(k, names.get(k)) for k in missing]}"
    assert not extra, f"in {DOC.name} but not advertised: {extra}"
    for key, (low, high) in advertised.items():
        name, doc_low, doc_high = doc[key]
        assert name == names[key], f"API {key} is {names[key]}, the document says {name}"
        assert (doc_low, doc_high) == (low, high), (
            f"{name} ({key}): advertised {low}-{high}, the document says {doc_low}-{doc_high}")


def test_share_state_apis_are_not_served(tidegate: Tidegate) -> None:
    """ReadShareGroupState (84), between Kafka brokers, is not advertised (the document
    says so): a request with it closes the connection, as for any key not served."""
    header = struct.pack(">hhih", 84, 0, 1, 3) + b"doc" + b"\x00"
    with socket.create_connection(("127.0.0.1", tidegate.port), timeout=30) as s:
        s.sendall(struct.pack(">i", len(header) + 1) + header + b"\x00")
        try:
            data = s.recv(4096)
        except ConnectionResetError:
            data = b""
        assert data == b"", "answered instead of closing"
    text = DOC.read_text().split(SECTION, 1)[1].split("\n## ", 1)[0]
    for name in ("ReadShareGroupState (84)", "WriteShareGroupState (85)"):
        assert name in text, f"{DOC.name} does not say what happens to {name}"
