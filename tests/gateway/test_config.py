"""``tidegate serve`` configuration: TOML keys, flag overrides, bad keys."""

from __future__ import annotations

from pathlib import Path

import pytest
from tidegate.gateway.cli import main
from tidegate.gateway.config import load_config, settings_from_env


def test_toml_keys_and_flag_overrides(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text(
        'data-dir = "/srv/tg"\nlisten = "0.0.0.0:19092"\nrest = "off"\n'
        '"auto.create.topics.enable" = false\n"num.partitions" = 6\n'
        '"socket.request.max.bytes" = 1000\n"message.max.bytes" = 2000\n'
        '[store]\ncache_bytes_max = 1048576\n'
    )
    config = load_config(path, {"listen": "127.0.0.1:1", "grpc": None})
    assert config.data_dir == Path("/srv/tg")
    assert config.listen_address == ("127.0.0.1", 1)
    assert config.advertised_address == ("127.0.0.1", 1)
    assert (config.rest, config.grpc) == ("off", "127.0.0.1:9090")
    assert config.auto_create_topics_enable is False and config.num_partitions == 6
    assert (config.socket_request_max_bytes, config.message_max_bytes) == (1000, 2000)
    assert config.store == {"cache_bytes_max": 1048576}


def test_defaults() -> None:
    config = load_config(None, {})
    assert config.data_dir == Path("./tidegate-data")
    assert (config.listen, config.rest, config.grpc) == (
        "127.0.0.1:9092", "127.0.0.1:9080", "127.0.0.1:9090")
    assert config.auto_create_topics_enable and config.num_partitions == 1
    assert config.socket_request_max_bytes == 100 * 1024 * 1024
    assert config.zookeeper_session_timeout_ms == 6000


def test_bad_config_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.toml"
    path.write_text('"num.partitons" = 3\n')
    assert main(["serve", "--config", str(path)]) == 2
    assert "unknown config key" in capsys.readouterr().err
    assert main(["serve", "--listen", "nonsense"]) == 2


async def test_listen_address_in_use_fails_cleanly(tmp_path: Path) -> None:
    import socket

    from tests.gateway.conftest import Node

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        node = Node(tmp_path / "data")
        await node.store.start()
        await node.controller.start()
        from tidegate.gateway.app import Gateway
        from tidegate.gateway.config import GatewayConfig

        gw = Gateway(GatewayConfig(data_dir=tmp_path / "data", listen=f"127.0.0.1:{port}"),
                     node.store, node.controller)
        with pytest.raises(OSError):
            await gw.start()
        assert gw.ctx is None
        await node.close()
    node = Node(tmp_path / "data")  # the index was closed: it opens again
    await node.start()
    await node.close()


def test_precedence_flags_set_env_file(tmp_path: Path) -> None:
    """Flags > --set (in order) > TIDEGATE_* > file > defaults, tables key by key."""
    path = tmp_path / "t.toml"
    path.write_text(
        '"num.partitions" = 2\n"message.max.bytes" = 2000\nrest = "off"\n'
        '[store]\ncache_bytes_max = 1\ntier1_replication_factor = 3\n'
    )
    env = {
        "TIDEGATE_NUM_PARTITIONS": "5", "TIDEGATE_MESSAGE_MAX_BYTES": "3000",
        "TIDEGATE_AUTO_CREATE_TOPICS_ENABLE": "false", "TIDEGATE_LISTEN": "0.0.0.0:1",
        "TIDEGATE_STORE__CACHE_BYTES_MAX": "2", "HOME": "/root",
    }
    sets = ["num.partitions=7", "store.cache-bytes-max=4", "num.partitions=8", "grpc=off"]
    config = load_config(path, {"listen": "127.0.0.1:2"}, env=env, sets=sets)
    assert config.num_partitions == 8  # the last --set
    assert config.message_max_bytes == 3000  # the environment over the file
    assert config.auto_create_topics_enable is False
    assert config.listen == "127.0.0.1:2"  # the flag over the environment
    assert (config.rest, config.grpc) == ("off", "off")
    assert config.store == {"cache_bytes_max": 4, "tier1_replication_factor": 3}


def test_environment_names() -> None:
    settings, unknown = settings_from_env({
        "TIDEGATE_DATA_DIR": "/srv", "TIDEGATE_GROUPS__SESSION_TIMEOUT_MS_MAX": "60000",
        "TIDEGATE_BASE_IMAGE": "x", "TIDEGATE_STORE": "1", "PATH": "/bin",
    })
    assert settings == {"data_dir": "/srv", "groups": {"session_timeout_ms_max": 60000}}
    assert unknown == ["TIDEGATE_BASE_IMAGE", "TIDEGATE_STORE"]


def test_bad_values_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--set", "num.partitions"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err
    assert main(["serve", "--set", "num.partitions=many"]) == 2
    assert "invalid value 'many' for num.partitions: must be an integer" in capsys.readouterr().err
    assert main(["serve", "--set", "no.such.key=1"]) == 2
    assert "unknown config key 'no.such.key'" in capsys.readouterr().err
    assert main(["serve", "--set", "auto.create.topics.enable=yes"]) == 2
    assert "for auto.create.topics.enable: must be true or false" in capsys.readouterr().err
    assert main(["serve", "--set", "zookeeper.session.timeout.ms=0"]) == 2
    assert "invalid value 0 for zookeeper.session.timeout.ms: must be at least 1" in capsys.readouterr().err


def test_served_with_environment_set_and_json_log(tmp_path: Path) -> None:
    """A real ``tidegate serve`` configured by a variable and a ``--set``: an
    auto-created topic gets the environment's partition count; every log line is JSON."""
    import json
    import os
    import subprocess
    import sys

    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    from tests.conftest import free_port

    port = free_port()
    env = {**os.environ, "TIDEGATE_NUM_PARTITIONS": "4", "TIDEGATE_LOG_FORMAT": "json"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tidegate", "serve", "--data-dir", str(tmp_path / "d"),
         "--listen", f"127.0.0.1:{port}", "--set", "rest=off", "--set", "grpc=off"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        lines = [first]
        while b"tidegate ready" not in lines[-1]:
            line = proc.stdout.readline()
            assert line, b"".join(lines).decode()
            lines.append(line)
        p = Producer({"bootstrap.servers": f"127.0.0.1:{port}"})
        p.produce("auto-created", b"x")
        assert p.flush(30) == 0
        topics = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"}).list_topics(
            timeout=10).topics
        assert len(topics["auto-created"].partitions) == 4
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    records = [json.loads(line) for line in b"".join(lines).splitlines() + out.splitlines()]
    assert {"time", "level", "logger", "message"} <= set(records[0])
    assert any(r["message"].startswith("tidegate ready") and r["level"] == "INFO"
               for r in records)
    assert any(r["message"] == "tidegate stopped" for r in records)
