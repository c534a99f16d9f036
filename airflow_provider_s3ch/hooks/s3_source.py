"""The boto3 S3 client and the credentials ClickHouse reads S3 with, from one Airflow ``aws`` connection.

AwsBaseHook is how Airflow users expect AWS credentials to work: keys, profiles,
assumed roles, session tokens, ``endpoint_url`` in the extra. The worker uses it
to list the bucket; ClickHouse gets the same credentials (frozen, with the session
token if any) to read the objects itself. When the connection yields no
credentials at all, the bucket is treated as public: listing is unsigned and
ClickHouse reads with ``NOSIGN``.
"""

from __future__ import annotations

from typing import Any

import boto3.session
from botocore.client import BaseClient

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
        return self.session.client("s3", **kwargs)
