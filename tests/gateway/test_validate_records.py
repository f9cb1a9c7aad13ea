"""``gateway.log.validate``: every batch a real client builds passes, in every codec; any
mutation of one either still walks as the records it claims or raises ``RecordsError``,
never anything else."""

from __future__ import annotations

import random

import pytest
from tidegate.gateway.log import validate
from tidegate.gateway.log.validate import RecordsError, validate_records
from tidegate.protocol.record_batch import read_header

from tests.clients.requests import record_batch

LIMIT = 1 << 20


@pytest.fixture(params=["c", "aiokafka"])
def walker(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both walks: the C one (built with the package; its absence fails here) and
    aiokafka's, the fallback."""
    assert validate._recordwalk is not None, "the C record walk was not built"
    if request.param == "aiokafka":
        monkeypatch.setattr(validate, "_recordwalk", None)
    return str(request.param)


@pytest.mark.parametrize("codec", range(5))
def test_client_batches_pass(codec: int, walker: str) -> None:
    for n in (1, 2, 50):
        data = record_batch([b"v" * i for i in range(n)], compression=codec)
        validate_records(memoryview(data), read_header(data), LIMIT)


@pytest.mark.parametrize("codec", range(5))
def test_mutations_raise_only_records_errors(codec: int, walker: str) -> None:
    rng = random.Random(codec)
    good = record_batch([b"value-%d" % i for i in range(20)], compression=codec)
    for _ in range(1500):
        data = bytearray(good)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(61, len(data))
            data[at] = rng.randrange(256)
        if rng.random() < 0.2:
            del data[rng.randrange(62, len(data)):]
            data[8:12] = (len(data) - 12).to_bytes(4, "big")
        header = read_header(data)
        try:
            validate_records(memoryview(data), header, LIMIT)
        except RecordsError as exc:
            assert exc.message
