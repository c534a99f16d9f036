"""A ZooKeeper for the local stack (``LocalStack(keeper=True)``), from Debian's ``zookeeper`` package.

Keeper-backed engines (``S3Queue``, ``ReplicatedMergeTree``, ``ON CLUSTER`` DDL) need a
ZooKeeper. The chdb-core engine embeds no Keeper server, so the stack runs Apache ZooKeeper
(3.8 on Debian 12) as one plain Java process, ``ZooKeeperServerMain`` on a loopback port,
with its config, data and log under the stack's workdir. This module knows where the package
puts its jars and what the server and the nodes are told; :class:`~.stack.LocalStack`
starts and stops the process as it does its other servers.
"""

from __future__ import annotations

import shutil
import socket
from dataclasses import dataclass
from pathlib import Path

#: Where Debian puts the package's jars (``zookeeper.jar`` marks the package).
JAVA_DIR = Path("/usr/share/java")
#: How to get ZooKeeper (and a Java runtime, which the package depends on).
INSTALL_HINT = "apt-get install zookeeper"
#: The logging binding the server's slf4j logs through, if installed (without it ZooKeeper logs nothing).
_LOG_JARS = ("slf4j-log4j12.jar", "log4j-1.2.jar")
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"


class ZooKeeperNotInstalled(RuntimeError):
    """ZooKeeper (or Java) is not installed where the stack looks for it."""


@dataclass(frozen=True)
class ZooKeeperInstall:
    """What starting a ZooKeeper server needs: the ``java`` command and the jars of its classpath."""

    java: str
    jars: tuple[Path, ...]

    def argv(self, conf_dir: Path, tmp_dir: Path) -> list[str]:
        """The command that runs a standalone server on ``conf_dir/zoo.cfg``.

        :param conf_dir: holds ``zoo.cfg`` and ``log4j.properties`` (first on the classpath).
        :param tmp_dir: Java's temporary directory (the stack's, removed with it).
        """
        classpath = ":".join([str(conf_dir), *(str(j) for j in self.jars)])
        return [
            self.java, "-Xmx64m", "-XX:+UseSerialGC", "-XX:-UsePerfData", f"-Djava.io.tmpdir={tmp_dir}",
            "-cp", classpath, MAIN_CLASS, str(conf_dir / "zoo.cfg"),
        ]


def find_zookeeper(java_dir: Path | None = None) -> ZooKeeperInstall:
    """The installed ZooKeeper: Debian's jars in ``java_dir`` and ``java`` on the PATH.

    ``zookeeper.jar`` names its dependencies in its manifest; the logging binding is added when present.

    :param java_dir: where the jars are (:data:`JAVA_DIR` if None).
    :raises ZooKeeperNotInstalled: no ``zookeeper.jar`` there, or no ``java``; the message says how to install.
    """
    folder = JAVA_DIR if java_dir is None else java_dir
    jar = folder / "zookeeper.jar"
    if not jar.is_file():
        raise ZooKeeperNotInstalled(
            f"LocalStack(keeper=True) needs ZooKeeper, and {jar} is missing: install it with "
            f"`{INSTALL_HINT}` (Debian/Ubuntu; it brings a Java runtime too)"
        )
    java = shutil.which("java")
    if java is None:
        raise ZooKeeperNotInstalled(
            f"LocalStack(keeper=True) found {jar} but no `java` on the PATH: install a Java runtime, e.g. with "
            f"`{INSTALL_HINT}` (Debian/Ubuntu)"
        )
    return ZooKeeperInstall(java, (jar, *(folder / name for name in _LOG_JARS if (folder / name).is_file())))


def zoo_cfg(data_dir: Path, port: int) -> str:
    """A standalone server's ``zoo.cfg``: loopback only, no admin HTTP server, ``ruok`` allowed (readiness)."""
    return (
        "tickTime=2000\n"
        f"dataDir={data_dir}\n"
        f"clientPort={port}\n"
        "clientPortAddress=127.0.0.1\n"
        "admin.enableServer=false\n"
        "4lw.commands.whitelist=ruok,srvr\n"
    )


#: The server logs to stdout, which the stack sends to ``keeper.log`` in its workdir.
LOG4J_PROPERTIES = """\
log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} - %-5p [%t:%C{1}@%L] - %m%n
"""


def write_config(conf_dir: Path, data_dir: Path, port: int) -> None:
    """Write ``zoo.cfg`` and ``log4j.properties`` into ``conf_dir``; create ``data_dir``."""
    conf_dir.mkdir(parents=True, exist_ok=True)
    data_dir.mkdir(parents=True, exist_ok=True)
    (conf_dir / "zoo.cfg").write_text(zoo_cfg(data_dir, port))
    (conf_dir / "log4j.properties").write_text(LOG4J_PROPERTIES)


def ruok(port: int, timeout: float = 1.0) -> bool:
    """Whether the server on ``127.0.0.1:port`` answers the four-letter ``ruok`` with ``imok``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(b"ruok")
            return s.recv(16) == b"imok"
    except OSError:
        return False


def zookeeper_xml(port: int) -> str:
    """A ClickHouse node's ``<zookeeper>`` section for the server on ``127.0.0.1:port``."""
    return f"<zookeeper><node><host>127.0.0.1</host><port>{port}</port></node></zookeeper>"
