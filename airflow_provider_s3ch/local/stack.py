"""A real local ClickHouse (one or more nodes) and a real S3 API server, for demos and tests.

ClickHouse is the chdb-core engine (ClickHouse 26.9) serving the native protocol,
one process per node; S3 is moto's server. Both listen on free loopback ports.
Nothing here is a mock: the operator talks to them exactly as to production servers.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import functools
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from airflow_provider_s3ch.core.plan.workload import parse_size
from airflow_provider_s3ch.local import keeper as zk

DEFAULT_CLUSTER = "s3ch_local"
DEFAULT_REGION = "eu-west-3"
DEFAULT_BUCKET = "s3ch-sample"
S3_ACCESS_KEY = "s3ch-local-access-key"
#: The named collection each node holds, with the stack's S3 keys (``s3_credentials="named_collection"``).
NAMED_COLLECTION = "s3ch_local"

#: The workload of loads when the stack starts with ``workload_memory``, under the root workload ``all``.
WORKLOAD = "loads"
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


#: The S3/SQS server's module: moto's server, its SQS message clock made cheap (:mod:`.moto_server`).
MOTO_SERVER = "airflow_provider_s3ch.local.moto_server"


#: Where :func:`free_port` draws from: below the kernel's ephemeral range, so that no outgoing connection takes a
#: port between the moment it is picked and the moment its server binds it.
_LISTEN_PORTS_FROM = 15_000


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux), or 0 where it cannot be read."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now.

    Drawn at random below the ephemeral range where there is room (test processes running side by side start
    servers at the same moment, and their outgoing connections take ephemeral ports); else the kernel's pick."""
    low = _ephemeral_low()
    draw = secrets.SystemRandom()
    for _ in range(50 if low > _LISTEN_PORTS_FROM + 1_000 else 0):
        port = draw.randrange(_LISTEN_PORTS_FROM, low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


#: Signals held back while a child process starts (see ``LocalStack._spawn``).
_HELD_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def _die_with_parent(parent: int, mask: set[signal.Signals]) -> None:  # pragma: no cover - runs in the child
    """Make the child get SIGTERM if the process that started it dies (Linux); give it the parent's signal mask."""
    os.setsid()
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    if os.getppid() != parent:  # the parent died before PR_SET_PDEATHSIG took effect
        os._exit(1)


def s3_notification(bucket: str, key: str, size: int, etag: str, when: datetime.datetime,
                    region: str = DEFAULT_REGION) -> str:
    """The body of an S3 event notification of one created object, as S3 (and the local server) sends it to SQS:
    for a test or a benchmark that sends notifications itself (dropped, repeated, late)."""
    return json.dumps({"Records": [{
        "eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": region,
        "eventTime": when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
        "eventName": "ObjectCreated:Put",
        "s3": {"s3SchemaVersion": "1.0", "bucket": {"name": bucket, "arn": f"arn:aws:s3:::{bucket}"},
               "object": {"key": urllib.parse.quote_plus(key), "size": size, "eTag": etag, "sequencer": "0"}}}]})


def create_bucket(s3: Any, name: str, region: str) -> None:
    """Create a bucket in ``region`` with the boto3 S3 client ``s3``; no error if it exists."""
    kwargs: dict[str, Any] = {"Bucket": name}
    if region != "us-east-1":
        kwargs["CreateBucketConfiguration"] = {"LocationConstraint": region}
    with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
        s3.create_bucket(**kwargs)


def notify_queue(s3: Any, sqs: Any, bucket: str, queue: str, *, prefix: str = "",
                 visibility_timeout: int | None = None) -> str:
    """Create the SQS queue ``queue`` (if it does not exist) and have ``bucket`` send it an event notification for
    every object created under ``prefix`` (``s3:ObjectCreated:*``), beside the notifications the bucket already
    sends (once: a second call with the same queue and prefix adds nothing): :meth:`LocalStack.notify_queue` and
    ``s3ch-local queue``, with the boto3 clients ``s3`` and ``sqs``.

    :return: the queue's URL.
    """
    attributes = {} if visibility_timeout is None else {"VisibilityTimeout": str(int(visibility_timeout))}
    url = sqs.create_queue(QueueName=queue, Attributes=attributes)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    config = s3.get_bucket_notification_configuration(Bucket=bucket)
    config.pop("ResponseMetadata", None)
    entry: dict[str, Any] = {"QueueArn": arn, "Events": ["s3:ObjectCreated:*"]}
    if prefix:
        entry["Filter"] = {"Key": {"FilterRules": [{"Name": "prefix", "Value": prefix}]}}
    entries = config.get("QueueConfigurations", [])
    if any({k: e.get(k) for k in entry} == entry for e in entries):
        return str(url)  # already notified (the same queue, events and prefix): not twice
    config["QueueConfigurations"] = [*entries, entry]
    s3.put_bucket_notification_configuration(Bucket=bucket, NotificationConfiguration=config)
    return str(url)


@dataclass
class NodeInfo:
    """One ClickHouse node of the stack."""

    index: int
    tcp_port: int
    http_port: int
    workdir: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.tcp_port}"


class LocalStackError(RuntimeError):
    """The local stack could not start."""


class LocalStack:
    """Start N real ClickHouse nodes and a real S3 server on loopback; stop them on exit.

    >>> with LocalStack(nodes=1, region="eu-west-3") as stack:   # doctest: +SKIP
    ...     stack.s3_client()            # boto3 S3 client on the local S3
    ...     stack.clickhouse_client(0)   # clickhouse_driver.Client on node 0
    ...     stack.airflow_env()          # AIRFLOW_CONN_* variables for the operator

    :param nodes: how many ClickHouse nodes; all are in one cluster, ``stack.cluster``.
    :param region: the region the ClickHouse connection declares (extra ``region``),
        and the default region of buckets the stack creates.
    :param workdir: where node data and logs go; a temporary directory (removed on stop) if None.
    :param password: the ClickHouse ``default`` user's password; random if None.
    :param cluster: the cluster's name in ``remote_servers``.
    :param start_timeout: seconds to wait for each server to answer.
    :param workload_memory: when given (``"3Gi"``, ``"3G"`` or bytes, as ClickHouse writes sizes), each node
        gets workload scheduling for loads: ``CREATE RESOURCE memory (MEMORY RESERVATION)``, ``CREATE
        WORKLOAD all SETTINGS max_memory = <workload_memory>`` and ``CREATE WORKLOAD loads IN all`` (each
        node its own: there is no Keeper), and the ClickHouse connection's extra ``workload`` is ``loads``.
    :param keeper: also start a ZooKeeper (Debian's ``zookeeper`` package, :mod:`.keeper`) on a free loopback
        port, ``stack.keeper_port``, and give every node's ``config.xml`` its ``<zookeeper>`` section, for
        Keeper-backed engines such as ``S3Queue``. :meth:`start` raises :class:`LocalStackError` naming
        ``apt-get install zookeeper`` when the package is missing.
    """

    def __init__(
        self,
        nodes: int = 1,
        region: str = DEFAULT_REGION,
        workdir: str | os.PathLike[str] | None = None,
        password: str | None = None,
        cluster: str = DEFAULT_CLUSTER,
        start_timeout: float = 90.0,
        workload_memory: str | int | None = None,
        keeper: bool = False,
    ) -> None:
        if nodes < 1:
            raise ValueError("nodes must be at least 1")
        if workload_memory is not None and parse_size(workload_memory) is None:
            raise ValueError(
                f"workload_memory={workload_memory!r} is not a size as ClickHouse writes it: give bytes or a whole "
                "number with K, M, G, T (powers of 1000) or Ki, Mi, Gi, Ti (powers of 1024), e.g. '3Gi'"
            )
        self.workload_memory = workload_memory
        self.node_count = nodes
        self.region = region
        self.cluster = cluster
        # The engine's own session logs in as a passwordless ``default``; clients use ``s3ch``.
        self.user = "s3ch"
        self.password = password if password is not None else "ch-" + secrets.token_hex(8)
        self.s3_access_key = S3_ACCESS_KEY
        self.s3_secret_key = "s3-" + secrets.token_hex(12)
        self.start_timeout = start_timeout
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="s3ch-local-"))
        self.nodes: list[NodeInfo] = []
        self.s3_port = 0
        self._s3_process: subprocess.Popen[bytes] | None = None
        self.keeper = keeper
        self.keeper_port = 0
        self._keeper_process: subprocess.Popen[bytes] | None = None
        self._spawned: list[subprocess.Popen[bytes]] = []
        self._started = False

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> LocalStack:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> LocalStack:
        """Start the S3 server, ZooKeeper (``keeper=True``) and every node, and wait until all answer."""
        if self._started:
            return self
        install = self._find_keeper() if self.keeper else None  # before anything starts
        self._started = True
        atexit.register(self.stop)
        try:
            self.workdir.mkdir(parents=True, exist_ok=True)
            self.start_s3()
            if install is not None:
                self._start_keeper(install)
            self.nodes = [
                NodeInfo(i, free_port(), free_port(), self.workdir / f"node{i}") for i in range(self.node_count)
            ]
            for node in self.nodes:
                self._write_config(node)
                node.process = self._spawn(
                    [sys.executable, "-m", "airflow_provider_s3ch.local.node", str(node.workdir)],
                    node.workdir / "node.log",
                )
            for node in self.nodes:
                self._wait_node(node)
            if self.workload_memory is not None:
                for sql in self.workload_ddl():
                    self.execute_on_all(sql)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every process the stack started; remove the temporary workdir. Safe to call twice."""
        for node in self.nodes:
            self._terminate(node.process)
            node.process = None
        self._terminate(self._keeper_process)  # after the nodes, which hold sessions on it
        self._keeper_process = None
        self.stop_s3()
        for proc in self._spawned:  # one a signal interrupted before it was recorded above
            self._terminate(proc)
        self._spawned.clear()
        if self._own_workdir and self.workdir.exists():
            shutil.rmtree(self.workdir, ignore_errors=True)
        self._started = False
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)

    def restart_node(self, index: int = 0, *, kill: bool = True) -> None:
        """Stop node ``index`` (SIGKILL, as a crash; ``kill=False``: SIGTERM) and start it again on the same
        ports and data directory; wait until it answers.

        What a restart keeps and loses is the engine's: MergeTree tables, their parts and comments stay;
        ``system.query_log`` and the other system tables start empty, and queries that ran are gone. The
        workload scheduling of ``workload_memory`` is set up again.

        :param index: the node.
        :param kill: SIGKILL (no shutdown) rather than SIGTERM.
        """
        node = self.nodes[index]
        if node.process is not None and node.process.poll() is None:
            if kill:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.process.pid, signal.SIGKILL)
                node.process.wait(timeout=30)
            else:
                self._terminate(node.process)
        node.process = self._spawn(
            [sys.executable, "-m", "airflow_provider_s3ch.local.node", str(node.workdir)], node.workdir / "node.log"
        )
        self._wait_node(node)
        if self.workload_memory is not None:
            client = self.clickhouse_client(index)
            for sql in self.workload_ddl():
                client.execute(sql)

    def start_s3(self) -> None:
        """Start (or restart, on the same port) the S3 server. A restart starts empty."""
        if self._s3_process is not None and self._s3_process.poll() is None:
            return
        if not self.s3_port:
            self.s3_port = free_port()
        self._s3_process = self._spawn(
            [sys.executable, "-m", MOTO_SERVER, "-H", "127.0.0.1", "-p", str(self.s3_port)],
            self.workdir / "s3.log",
        )
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self._s3_process.poll() is not None:
                raise LocalStackError(f"the S3 server exited: {self._tail(self.workdir / 's3.log')}")
            with contextlib.suppress(Exception):
                urllib.request.urlopen(f"{self.s3_endpoint}/", timeout=1).read()
                return
            time.sleep(0.1)
        raise LocalStackError(f"the S3 server did not answer on port {self.s3_port}")

    def stop_s3(self) -> None:
        """Stop the S3 server (its objects are lost)."""
        self._terminate(self._s3_process)
        self._s3_process = None

    # ------------------------------------------------------------------ clients and settings
    @property
    def s3_endpoint(self) -> str:
        """The S3 server's URL, as both the worker and ClickHouse reach it."""
        return f"http://127.0.0.1:{self.s3_port}"

    def s3_client(self, region: str | None = None) -> Any:
        """A boto3 S3 client on the local S3 server.

        :param region: the client's region (default: the stack's).
        """
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.s3_endpoint,
            aws_access_key_id=self.s3_access_key,
            aws_secret_access_key=self.s3_secret_key,
            region_name=region or self.region,
        )

    def create_bucket(self, name: str, region: str | None = None) -> None:
        """Create a bucket in ``region`` (default: the stack's region); no error if it exists."""
        region = region or self.region
        create_bucket(self.s3_client(region), name, region)

    def sqs_client(self, region: str | None = None) -> Any:
        """A boto3 SQS client on the local S3 server, which serves SQS too.

        :param region: the client's region (default: the stack's).
        """
        import boto3

        return boto3.client(
            "sqs",
            endpoint_url=self.s3_endpoint,
            aws_access_key_id=self.s3_access_key,
            aws_secret_access_key=self.s3_secret_key,
            region_name=region or self.region,
        )

    def notify_queue(self, bucket: str, queue: str, *, prefix: str = "", visibility_timeout: int | None = None) -> str:
        """Create the SQS queue ``queue`` (if it does not exist) and have ``bucket`` send it an event notification
        for every object created under ``prefix``, beside the notifications the bucket already sends.

        The server then sends the queue an ``s3:TestEvent`` first, as S3 does; it drops a notification whose
        queue does not exist, and loses its queues when it restarts (:meth:`start_s3`).

        :param bucket: an existing bucket (:meth:`create_bucket`).
        :param queue: the queue's name.
        :param prefix: only keys starting with it are notified.
        :param visibility_timeout: the queue's visibility timeout in seconds (SQS's default, 30 s, if None).
        :return: the queue's URL.
        """
        return notify_queue(self.s3_client(), self.sqs_client(), bucket, queue, prefix=prefix,
                            visibility_timeout=visibility_timeout)

    def clickhouse_client(self, node: int = 0, **kwargs: Any) -> Any:
        """A ``clickhouse_driver.Client`` on one node."""
        from clickhouse_driver import Client

        kwargs.setdefault("user", self.user)
        kwargs.setdefault("password", self.password)
        return Client("127.0.0.1", port=self.nodes[node].tcp_port, **kwargs)

    def execute_on_all(self, sql: str) -> None:
        """Run one statement on every node (there is no Keeper, so ``ON CLUSTER`` DDL fails here)."""
        for i in range(len(self.nodes)):
            self.clickhouse_client(i).execute(sql)

    def workload_ddl(self) -> list[str]:
        """The statements that give a node workload scheduling for loads (``workload_memory``)."""
        value = self.workload_memory
        size = str(value) if isinstance(value, int) else "'" + str(value).strip().strip("'") + "'"
        return [
            "CREATE RESOURCE IF NOT EXISTS memory (MEMORY RESERVATION)",
            f"CREATE OR REPLACE WORKLOAD all SETTINGS max_memory = {size}",
            f"CREATE OR REPLACE WORKLOAD {WORKLOAD} IN all",
        ]

    def create_distributed_table(
        self,
        name: str,
        local_ddl: str,
        *,
        database: str = "default",
        sharding_key: str = "rand()",
        local_suffix: str = "_local",
    ) -> tuple[str, str]:
        """Create a local table on every node and a Distributed table over them (on every node).

        :param name: the Distributed table's name; the local table is ``name + local_suffix``.
        :param local_ddl: a ``CREATE TABLE`` statement with ``{table}`` where the local table's name goes.
        :param database: the database of both tables.
        :param sharding_key: the Distributed table's sharding key.
        :param local_suffix: what the local table's name adds to ``name``.
        :return: (distributed table, local table), both ``database.name``.
        """
        local = f"{name}{local_suffix}"
        self.execute_on_all(f"CREATE DATABASE IF NOT EXISTS `{database}`")
        self.execute_on_all(local_ddl.format(table=f"`{database}`.`{local}`"))
        self.execute_on_all(
            f"CREATE TABLE IF NOT EXISTS `{database}`.`{name}` AS `{database}`.`{local}` "
            f"ENGINE = Distributed('{self.cluster}', '{database}', '{local}', {sharding_key})"
        )
        return f"{database}.{name}", f"{database}.{local}"

    def clickhouse_connection(self, node: int = 0, **extra: Any) -> dict[str, Any]:
        """The ``clickhouse_native`` Airflow connection (as a JSON-able dict) for one node."""
        conn_extra: dict[str, Any] = {
            "region": self.region, "s3_endpoint_url": self.s3_endpoint, "http_port": self.nodes[node].http_port
        }
        if self.node_count > 1:
            conn_extra["cluster"] = self.cluster
        if self.workload_memory is not None:
            conn_extra["workload"] = WORKLOAD
        conn_extra.update(extra)
        return {
            "conn_type": "clickhouse_native",
            "host": "127.0.0.1",
            "port": self.nodes[node].tcp_port,
            "login": self.user,
            "password": self.password,
            "schema": "default",
            "extra": conn_extra,
        }

    def aws_connection(self) -> dict[str, Any]:
        """The ``aws`` Airflow connection (as a JSON-able dict) for the local S3."""
        return {
            "conn_type": "aws",
            "login": self.s3_access_key,
            "password": self.s3_secret_key,
            "extra": {"endpoint_url": self.s3_endpoint, "region_name": self.region},
        }

    def airflow_env(
        self, clickhouse_conn_id: str = "clickhouse_native_default", aws_conn_id: str = "aws_default"
    ) -> dict[str, str]:
        """``AIRFLOW_CONN_*`` variables for this stack (by default ``CLICKHOUSE_NATIVE_DEFAULT``, ``AWS_DEFAULT``).

        :param clickhouse_conn_id: the ClickHouse connection's id.
        :param aws_conn_id: the AWS connection's id.
        """
        return {
            f"AIRFLOW_CONN_{clickhouse_conn_id.upper()}": json.dumps(self.clickhouse_connection(0)),
            f"AIRFLOW_CONN_{aws_conn_id.upper()}": json.dumps(self.aws_connection()),
        }

    @contextlib.contextmanager
    def environ(
        self, clickhouse_conn_id: str = "clickhouse_native_default", aws_conn_id: str = "aws_default"
    ) -> Iterator[dict[str, str]]:
        """Set :meth:`airflow_env` in ``os.environ`` for the duration of the block."""
        env = self.airflow_env(clickhouse_conn_id, aws_conn_id)
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            yield env
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    # ------------------------------------------------------------------ internals
    @staticmethod
    def _find_keeper() -> zk.ZooKeeperInstall:
        try:
            return zk.find_zookeeper()
        except zk.ZooKeeperNotInstalled as exc:
            raise LocalStackError(str(exc)) from exc

    def _start_keeper(self, install: zk.ZooKeeperInstall) -> None:
        """Start ZooKeeper on a free loopback port (config, data and ``keeper.log`` in the workdir); wait for
        ``imok``."""
        self.keeper_port = free_port()
        home = self.workdir / "keeper"
        zk.write_config(home / "conf", home / "data", self.keeper_port)
        log = self.workdir / "keeper.log"
        self._keeper_process = self._spawn(install.argv(home / "conf", self.workdir / "tmp"), log)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self._keeper_process.poll() is not None:
                raise LocalStackError(f"ZooKeeper exited with {self._keeper_process.returncode}: {self._tail(log)}")
            if zk.ruok(self.keeper_port):
                return
            time.sleep(0.1)
        raise LocalStackError(f"ZooKeeper did not answer on port {self.keeper_port}: {self._tail(log)}")

    def _spawn(self, argv: list[str], log_path: Path) -> subprocess.Popen[bytes]:
        """Start a child process; :meth:`stop` ends it, also when a signal's handler raises during the start.

        The stop signals are held back until the child is recorded in ``_spawned``: a handler
        that raises inside ``Popen`` would lose a child that had already been forked. The
        child's temporary files go into the workdir, which :meth:`stop` removes.
        """
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        env["TMPDIR"] = str(self.workdir / "tmp")
        (self.workdir / "tmp").mkdir(parents=True, exist_ok=True)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD_SIGNALS)
        try:
            with open(log_path, "ab") as log:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    preexec_fn=functools.partial(_die_with_parent, os.getpid(), mask),
                )
            self._spawned = [p for p in self._spawned if p.poll() is None] + [proc]
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        return proc

    @staticmethod
    def _terminate(proc: subprocess.Popen[bytes] | None) -> None:
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    @staticmethod
    def _tail(path: Path, lines: int = 20) -> str:
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _wait_node(self, node: NodeInfo) -> None:
        from clickhouse_driver import Client

        deadline = time.monotonic() + self.start_timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            assert node.process is not None
            if node.process.poll() is not None:
                raise LocalStackError(
                    f"ClickHouse node {node.index} exited with {node.process.returncode}: "
                    f"{self._tail(node.workdir / 'node.log')}"
                )
            if _port_open(node.tcp_port):
                try:
                    Client("127.0.0.1", port=node.tcp_port, user=self.user, password=self.password).execute("SELECT 1")
                    return
                except Exception as exc:
                    if getattr(exc, "code", None) == 516:  # AUTHENTICATION_FAILED will not pass by waiting
                        raise LocalStackError(f"ClickHouse node {node.index} refused the stack's user: {exc}") from exc
                    last = exc
            time.sleep(0.2)
        raise LocalStackError(f"ClickHouse node {node.index} did not answer on port {node.tcp_port}: {last}")

    def _write_config(self, node: NodeInfo) -> None:
        node.workdir.mkdir(parents=True, exist_ok=True)
        (node.workdir / "data").mkdir(exist_ok=True)
        pw = escape(self.password)
        shards = "".join(
            f"<shard><replica><host>127.0.0.1</host><port>{n.tcp_port}</port>"
            f"<user>{self.user}</user><password>{pw}</password></replica></shard>"
            for n in self.nodes
        )
        keeper = f"\n    {zk.zookeeper_xml(self.keeper_port)}" if self.keeper else ""
        config = f"""<clickhouse>
    <path>{escape(str(node.workdir / "data"))}/</path>
    <user_files_path>{escape(str(node.workdir / "user_files"))}/</user_files_path>
    <listen_host>127.0.0.1</listen_host>
    <tcp_port>{node.tcp_port}</tcp_port>
    <http_port>{node.http_port}</http_port>
    <logger><level>warning</level><console>0</console></logger>
    <query_log>
        <database>system</database>
        <table>query_log</table>
        <flush_interval_milliseconds>500</flush_interval_milliseconds>
    </query_log>
    <remote_servers>
        <{self.cluster}>{shards}</{self.cluster}>
    </remote_servers>{keeper}
    <user_directories><users_xml><path>{escape(str(node.workdir / "users.xml"))}</path></users_xml></user_directories>
    <named_collections><{NAMED_COLLECTION}>
        <access_key_id>{escape(self.s3_access_key)}</access_key_id>
        <secret_access_key>{escape(self.s3_secret_key)}</secret_access_key>
    </{NAMED_COLLECTION}></named_collections>
</clickhouse>
"""
        (node.workdir / "config.xml").write_text(config)
        users = f"""<clickhouse>
    <users>
        <default><password></password><profile>default</profile><quota>default</quota></default>
        <{self.user}>
            <password>{pw}</password>
            <networks><ip>127.0.0.1</ip><ip>::1</ip></networks>
            <profile>default</profile>
            <quota>default</quota>
            <access_management>1</access_management>
            <named_collection_control>1</named_collection_control>
        </{self.user}>
    </users>
    <profiles><default></default></profiles>
    <quotas><default></default></quotas>
</clickhouse>
"""
        (node.workdir / "users.xml").write_text(users)
