"""Configuration mistakes (issue 34, item 2), each through the real ``tidegate serve``
command as a user makes it (a flag, ``--set``, the TOML file or a ``TIDEGATE_*``
variable): one line naming the key, the value and what is allowed, exit status 2, and
nothing started. A misspelt variable is a warning; an encrypted admin TLS key is read
with ``ssl.key.password``."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
from pathlib import Path

import grpc
import httpx
import pytest
import trustme
from cryptography.hazmat.primitives import serialization
from tidegate.protocol.controller_grpc import pb2, pb2_grpc

from tests.clients.server import Tidegate
from tests.conftest import free_port


def _serve(tmp: Path, *args: str, env: dict[str, str] | None = None,
           toml: str | None = None) -> tuple[int, list[str]]:
    config: list[str] = []
    if toml is not None:
        (tmp / "t.toml").write_text(toml)
        config = ["--config", str(tmp / "t.toml")]
    variables = {k: v for k, v in os.environ.items() if not k.startswith("TIDEGATE_")}
    run = subprocess.run(
        [sys.executable, "-m", "tidegate", "serve", "--data-dir", str(tmp / "data"),
         "--listen", f"127.0.0.1:{free_port()}", "--grpc", "off", *config, *args],
        capture_output=True, text=True, timeout=60, env={**variables, **(env or {})},
    )
    return run.returncode, (run.stdout + run.stderr).splitlines()


def _one_line(code: int, lines: list[str], expected: str) -> None:
    assert code == 2 and lines == [f"tidegate: {expected}"], (code, lines)


@pytest.mark.parametrize(
    ("how", "expected"),
    [
        ("flag", "unknown config key 'store.cache_bytes_mx' (did you mean 'store.cache_bytes_max'?)"),
        ("file", "config file {file}: unknown config key 'store.cache_bytes_mx' "
                 "(did you mean 'store.cache_bytes_max'?)"),
        ("env", "TIDEGATE_STORE__CACHE_BYTES_MX: unknown config key 'store.cache_bytes_mx' "
                "(did you mean 'store.cache_bytes_max'?)"),
    ],
)
def test_misspelt_table_key(tmp_path: Path, how: str, expected: str) -> None:
    if how == "flag":
        code, lines = _serve(tmp_path, "--set", "store.cache_bytes_mx=5", "--rest", "off")
    elif how == "file":
        code, lines = _serve(tmp_path, "--rest", "off", toml="[store]\ncache_bytes_mx = 5\n")
    else:
        code, lines = _serve(tmp_path, "--rest", "off",
                             env={"TIDEGATE_STORE__CACHE_BYTES_MX": "5"})
    _one_line(code, lines, expected.format(file=tmp_path / "t.toml"))


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--set", "store.cache_bytes_max=abc"],
         "invalid value 'abc' for store.cache_bytes_max: must be an integer"),
        (["--set", "store.writer_cache_share_max=lots"],
         "invalid value 'lots' for store.writer_cache_share_max: must be a number"),
        (["--set", "controller.autoscale_period_ms=soon"],
         "invalid value 'soon' for controller.autoscale_period_ms: must be an integer"),
        (["--set", "groups.max_group_size=-5"],
         "invalid value -5 for groups.max_group_size: must be at least 1"),
        (["--set", "groups.consumer_migration_policy=sideways"],
         "invalid value 'sideways' for groups.consumer_migration_policy: must be one of "
         "bidirectional, upgrade, downgrade, disabled"),
        (["--set", "num.partitions=0"], "invalid value 0 for num.partitions: must be at least 1"),
        (["--set", "num.partitions=-1"], "invalid value -1 for num.partitions: must be at least 1"),
        (["--set", "num.partitons=3"],
         "unknown config key 'num.partitons' (did you mean 'num.partitions'?)"),
        (["--set", "auto.create.topics.enable=yes"],
         "invalid value 'yes' for auto.create.topics.enable: must be true or false"),
        (["--set", "ssl.client.auth=sometimes"],
         "invalid value 'sometimes' for ssl.client.auth: must be one of required, requested, none"),
        (["--node-id", "-3"], "invalid value -3 for node-id: must be at least 0"),
        (["--listen", "127.0.0.1:99999"],
         "listen: port 99999 of '127.0.0.1:99999' is out of range: must be 0 to 65535"),
        (["--set", "listeners=PLAINTEXT://127.0.0.1:70000"],
         "listeners: port 70000 of 'PLAINTEXT://127.0.0.1:70000' is out of range: "
         "must be 0 to 65535"),
        (["--set", "groups.min_session_timeout_ms=2000000"],
         "groups.min_session_timeout_ms (2000000) may not exceed "
         "groups.max_session_timeout_ms (1800000)"),
        (["--set", "groups.consumer_heartbeat_interval_ms=45000"],
         "groups.consumer_heartbeat_interval_ms (45000) must be less than "
         "groups.consumer_session_timeout_ms (45000)"),
        (["--set", "admin.tls=true"], "admin.tls needs ssl.keystore.location (a PEM key)"),
        (["--set", "scope=a/b"],
         "invalid value 'a/b' for scope: must be 1+ characters of A-Z a-z 0-9 . _ -"),
        (["--set", "cluster.id="], "invalid value '' for cluster-id: must not be empty"),
        (["--set", "super.users=alice"], "invalid value 'alice' for super.users: must be "
         "principals separated by ';' (User:alice;User:bob)"),
        (["--set", "listener.security.protocol.map=X"],
         "listener.security.protocol.map: expected NAME:PROTOCOL with PROTOCOL one of "
         "PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL, got 'X'"),
        (["--data-dir="], "invalid value '' for data-dir: must name a directory"),
        (["--set", "store.tier1_plog_server_listen=abc"],
         "store.tier1_plog_server_listen: expected HOST:PORT, got 'abc'"),
        (["--zookeeper", "127.0.0.1:1"],
         "zookeeper (cluster mode) needs tier2-dir, a directory every node shares"),
    ],
)
def test_bad_value(tmp_path: Path, args: list[str], expected: str) -> None:
    code, lines = _serve(tmp_path, "--rest", "off", *args)
    _one_line(code, lines, expected)


def test_rest_on_the_kafka_port(tmp_path: Path) -> None:
    port = free_port()
    code, lines = _serve(tmp_path, "--listen", f"127.0.0.1:{port}", "--rest", f"0.0.0.0:{port}")
    _one_line(code, lines, f"rest and listen are both set to 0.0.0.0:{port}: each needs its "
              "own port")


def test_config_file_mistakes(tmp_path: Path) -> None:
    code, lines = _serve(tmp_path, "--rest", "off", toml='"num.partitions" = \n')
    _one_line(code, lines, f"config file {tmp_path / 't.toml'}: Invalid value (at line 1, "
              "column 20)")
    missing = tmp_path / "nowhere.toml"
    code, lines = _serve(tmp_path, "--rest", "off", "--config", str(missing))
    _one_line(code, lines, f"config file {missing}: No such file or directory")


@pytest.mark.parametrize(
    ("toml", "env", "expected"),
    [
        ("[stroe]\ncache_bytes_max = 5\n", {},
         "config file {file}: unknown config key 'stroe' (did you mean 'store'?)"),
        ("store = 5\n", {}, "config file {file}: store must be a table ([store] in the file)"),
        ('"num.partitions" = "three"\n', {},
         "config file {file}: invalid value 'three' for num.partitions: must be an integer"),
        (None, {"TIDEGATE_NUM_PARTITIONS": "abc"},
         "TIDEGATE_NUM_PARTITIONS: invalid value 'abc' for num.partitions: must be an integer"),
        (None, {"TIDEGATE_STORE__CACHE_BYTES_MAX": "-5"},
         "invalid value -5 for store.cache_bytes_max: must be at least 1"),
    ],
)
def test_file_and_variable_mistakes(tmp_path: Path, toml: str | None, env: dict[str, str],
                                    expected: str) -> None:
    code, lines = _serve(tmp_path, "--rest", "off", toml=toml, env=env)
    _one_line(code, lines, expected.format(file=tmp_path / "t.toml"))


def test_misspelt_variable_is_a_warning(tmp_path: Path) -> None:
    """``TIDEGATE_NUM_PARTITONS`` starts the server (other tools may read their own
    variables) with a warning naming the variable it is probably meant to be."""
    server = Tidegate(tmp_path / "data", tmp_path / "tidegate.log")
    os.environ["TIDEGATE_NUM_PARTITONS"] = "3"
    try:
        server.start()
    finally:
        del os.environ["TIDEGATE_NUM_PARTITONS"]
    try:
        assert ("WARNING tidegate: environment variable TIDEGATE_NUM_PARTITONS names no "
                "config key (did you mean TIDEGATE_NUM_PARTITIONS?); it is ignored"
                ) in server.tail(), server.tail()
    finally:
        assert server.stop() == 0


async def test_admin_tls_with_an_encrypted_key(tmp_path: Path) -> None:
    """REST and gRPC over TLS from a key encrypted with ``ssl.key.password`` (gRPC takes
    no password: it used to stop the start with "cannot bind the gRPC controller API")."""
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1", "localhost")
    key = serialization.load_pem_private_key(leaf.private_key_pem.bytes(), None)
    (tmp_path / "key.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"key-secret"),
    ))
    (tmp_path / "chain.pem").write_bytes(b"".join(c.bytes() for c in leaf.cert_chain_pems))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    (tmp_path / "t.toml").write_text(
        f'"ssl.keystore.location" = "{tmp_path / "key.pem"}"\n'
        f'"ssl.keystore.certificate.chain" = "{tmp_path / "chain.pem"}"\n'
        '"ssl.key.password" = "key-secret"\n"admin.tls" = true\n'
    )
    server = Tidegate(tmp_path / "data", tmp_path / "tidegate.log", tmp_path / "t.toml",
                      rest=True, grpc=True)
    try:
        server.start()
        verify = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
        health = httpx.get(f"https://127.0.0.1:{server.rest_port}/health", verify=verify,
                           timeout=10)
        assert health.status_code == 200, health.text
        credentials = grpc.ssl_channel_credentials((tmp_path / "ca.pem").read_bytes())
        async with grpc.aio.secure_channel(f"127.0.0.1:{server.grpc_port}", credentials) as ch:
            scopes = await pb2_grpc.ControllerServiceStub(ch).ListScopes(
                pb2.ListScopesRequest(), timeout=10)
        assert "kafka" in list(scopes.scopes)
        assert server.stop() == 0
    finally:
        server.close()
    (tmp_path / "t.toml").write_text(
        (tmp_path / "t.toml").read_text().replace("key-secret", "wrong"))
    code, lines = _serve(tmp_path, "--rest", f"127.0.0.1:{free_port()}",
                         "--config", str(tmp_path / "t.toml"))
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(
        f"tidegate: admin.tls: the key in {tmp_path / 'key.pem'} cannot be read with the "
        "ssl.key.password given"), lines


def test_bare_command_and_help() -> None:
    """A bare ``tidegate`` prints its usage and where the documents are; ``serve --help``
    shows every default and what ``off`` means."""
    bare = subprocess.run([sys.executable, "-m", "tidegate"], capture_output=True, text=True,
                          timeout=60)
    assert bare.returncode == 2 and bare.stderr.startswith("usage: tidegate"), bare.stderr
    assert "serve" in bare.stderr and "docs/operations.md" in bare.stderr, bare.stderr
    assert "Traceback" not in bare.stderr
    helped = subprocess.run([sys.executable, "-m", "tidegate", "serve", "--help"],
                            capture_output=True, text=True, timeout=60)
    text = " ".join(helped.stdout.split())
    assert helped.returncode == 0, helped.stderr
    for shown in ("(default ./tidegate-data)", "(default 127.0.0.1:9092)",
                  "(default 127.0.0.1:9080; off: no REST server)",
                  "(default 127.0.0.1:9090; off: no gRPC server)", "(default 0)",
                  "(default 4)", "(default: --listen)", "(default: none, one embedded node)"):
        assert shown in text, (shown, text)
    plog = subprocess.run([sys.executable, "-m", "tidegate", "plog-server", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert "plogs that no log records any more are deleted" in " ".join(plog.stdout.split())
