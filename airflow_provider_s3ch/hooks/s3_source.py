"""The boto3 S3 client and the credentials ClickHouse reads S3 with, from one Airflow ``aws`` connection.

AwsBaseHook is how Airflow users expect AWS credentials to work: keys, profiles,
assumed roles, session tokens, ``endpoint_url`` in the extra. The worker uses it
to list the bucket; ClickHouse gets the same credentials (frozen, with the session
token if any) to read the objects itself. When the connection yields no
credentials at all, the bucket is treated as public: listing is unsigned and
ClickHouse reads with ``NOSIGN``.
"""

from __future__ import annotations

import contextlib
import gc
import gzip
import json
import os
from collections.abc import Iterator
from typing import Any

import boto3.session
from botocore.client import BaseClient
from botocore.loaders import Loader

from airflow_provider_s3ch.core.models import S3Credentials
from airflow_provider_s3ch.hooks.quiet import quiet_loggers


class S3Source:
    """A boto3 S3 client and the credentials ClickHouse needs, from one ``aws`` connection.

    :param aws_conn_id: the Airflow connection id (``aws_default``); None for an
        anonymous (public-bucket) client with default settings.
    """

    def __init__(self, aws_conn_id: str | None = "aws_default") -> None:
        from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

        self.aws_conn_id = aws_conn_id
        self.hook = AwsBaseHook(aws_conn_id=aws_conn_id, client_type="s3")
        self._session: boto3.session.Session | None = None
        self._credentials: S3Credentials | None | bool = False

    @property
    def endpoint_url(self) -> str | None:
        """The connection's ``endpoint_url`` (extra), if any."""
        return self.hook.conn_config.endpoint_url

    @property
    def session(self) -> boto3.session.Session:
        if self._session is None:
            self._session = self.hook.get_session()
            # The session's clients load their models through the loader below (as the amazon provider gives
            # its async sessions a loader of its own): the same files, found and read in half the time.
            core = self._session._session  # boto3 exposes its botocore session no other way
            core.register_component("data_loader", ModelLoader(
                extra_search_paths=list(core.get_component("data_loader").search_paths),
                include_default_search_paths=False))
        return self._session

    @quiet_loggers()
    def credentials(self) -> S3Credentials | None:
        """Frozen credentials for ClickHouse, masked in logs by the amazon provider; None when anonymous."""
        if self._credentials is False:
            live = self.session.get_credentials()
            if live is None:
                self._credentials = None
            else:
                # Frozen from this source's one session (as the amazon hook's get_credentials does, without
                # building a second session), and registered with the secrets masker.
                from airflow_provider_s3ch.compat import mask_secret

                frozen = live.get_frozen_credentials()
                mask_secret(frozen.secret_key)
                if frozen.token:
                    mask_secret(frozen.token)
                self._credentials = S3Credentials(
                    access_key_id=frozen.access_key,
                    secret_access_key=frozen.secret_key,
                    session_token=frozen.token or None,
                )
        return self._credentials  # type: ignore[return-value]

    def client(self) -> BaseClient:
        """A boto3 S3 client; unsigned when the connection has no credentials."""
        from botocore import UNSIGNED
        from botocore.config import Config

        kwargs: dict[str, Any] = {"endpoint_url": self.endpoint_url}
        if self.credentials() is None:
            kwargs["config"] = Config(signature_version=UNSIGNED)
        else:
            config = self.hook.config
            if config is not None:
                kwargs["config"] = config
        with paused_gc():
            return self.session.client("s3", **kwargs)


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Python's cyclic garbage collector held back for the block (reference counting still frees what it
    drops), then restored as it was.

    Building the S3 side allocates a few hundred thousand objects (botocore's models, the listing) in a task
    whose imports (Airflow's) already hold as many: the collections they trigger walk them all, and took
    about 100 ms of a client's 150 ms build, measured.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class _JSONFiles:
    """botocore's JSON model files, read as its own file loader reads them (``.json``, then ``.json.gz``) into
    plain dicts, which keep their order, not the ``OrderedDict``s it builds: half the decoding time."""

    _OPENERS: dict[str, Any] = {".json": open, ".json.gz": gzip.open}

    def exists(self, file_path: str) -> bool:
        return any(os.path.isfile(file_path + ext) for ext in self._OPENERS)

    def load_file(self, file_path: str) -> Any:
        for ext, opener in self._OPENERS.items():
            if os.path.isfile(file_path + ext):
                with opener(file_path + ext, "rb") as fp:
                    return json.loads(fp.read())
        return None


class ModelLoader(Loader):
    """botocore's loader of service models, less the two costs that made up about half of every new client's
    build: before it loads a model, botocore walks every service's folder (400 of them, each version's too)
    only to check that the service is known (botocore/botocore#3687 would drop the walk); and it decodes
    the models into ``OrderedDict``s.
    """

    FILE_LOADER_CLASS = _JSONFiles

    def list_available_services(self, type_name: str) -> list[str]:
        """The search paths' folders: one listing each (a folder without a ``type_name`` model then fails
        to load with botocore's ``DataNotFoundError``, not ``UnknownServiceError``). ``scandir`` tells a folder
        from the listing itself, without a ``stat`` of each of its ~470 entries."""
        names: set[str] = set()
        for path in self.search_paths:
            with contextlib.suppress(OSError), os.scandir(path) as entries:
                names.update(entry.name for entry in entries if entry.is_dir())
        return sorted(names)
