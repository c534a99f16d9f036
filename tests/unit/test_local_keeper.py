"""``LocalStack(keeper=True)`` without ZooKeeper installed: a clear error that says how to install it, before any
server starts. No servers."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_s3ch.local import keeper
from airflow_provider_s3ch.local.stack import LocalStack, LocalStackError, NodeInfo


def test_a_missing_package_names_how_to_install_it(tmp_path: Path) -> None:
    with pytest.raises(keeper.ZooKeeperNotInstalled, match="apt-get install zookeeper"):
        keeper.find_zookeeper(tmp_path)


def test_the_stack_refuses_to_start_without_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keeper, "JAVA_DIR", tmp_path / "java")
    stack = LocalStack(keeper=True, workdir=tmp_path / "stack")
    with pytest.raises(LocalStackError, match="apt-get install zookeeper"):
        stack.start()
    assert not (tmp_path / "stack").exists()  # nothing started, nothing written
    assert stack.s3_port == 0


def test_java_missing_is_named_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "zookeeper.jar").write_bytes(b"")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(keeper.ZooKeeperNotInstalled, match="java.*apt-get install zookeeper"):
        keeper.find_zookeeper(tmp_path)


@pytest.mark.parametrize("with_keeper", [False, True])
def test_a_node_config_names_zookeeper_only_with_keeper(tmp_path: Path, with_keeper: bool) -> None:
    stack = LocalStack(keeper=with_keeper, workdir=tmp_path)
    stack.keeper_port = 2181 if with_keeper else 0
    node = NodeInfo(0, 9000, 8123, tmp_path / "node0")
    stack.nodes = [node]
    stack._write_config(node)
    config = (node.workdir / "config.xml").read_text()
    section = "<zookeeper><node><host>127.0.0.1</host><port>2181</port></node></zookeeper>"
    assert (section in config) is with_keeper
    assert ("<zookeeper>" in config) is with_keeper


def test_the_server_listens_on_loopback_only(tmp_path: Path) -> None:
    cfg = keeper.zoo_cfg(tmp_path, 12345)
    assert "clientPort=12345\n" in cfg and "clientPortAddress=127.0.0.1\n" in cfg
    assert "admin.enableServer=false\n" in cfg and "4lw.commands.whitelist=ruok" in cfg
