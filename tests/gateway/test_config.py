"""``tidegate serve`` configuration: TOML keys, flag overrides, bad keys."""

from __future__ import annotations

from pathlib import Path

import pytest
from tidegate.gateway.cli import main
from tidegate.gateway.config import load_config


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
