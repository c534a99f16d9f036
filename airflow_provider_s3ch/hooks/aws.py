"""S3 access through Airflow's standard ``aws`` connection (AwsBaseHook).

AwsBaseHook is how Airflow users expect AWS credentials to work: keys, profiles,
assumed roles, session tokens, ``endpoint_url`` in the extra. The worker uses it
to list the bucket; ClickHouse gets the same credentials (frozen, with the session
token if any) to read the objects itself. When the connection yields no
credentials at all, the bucket is treated as public: listing is unsigned and
ClickHouse reads with ``NOSIGN``.
"""

from __future__ import annotations

from typing import Any

from airflow_provider_s3ch.compat import mask_secret
from airflow_provider_s3ch.models import S3Credentials


def object_url(bucket: str, key_pattern: str, *, endpoint_url: str | None, region: str | None) -> str:
    """The URL ClickHouse's ``s3()`` reads, glob included.

    With an endpoint (MinIO, a local server, a VPC endpoint) the URL is path-style
    ``{endpoint}/{bucket}/{key}``; on AWS it is virtual-hosted
    ``https://{bucket}.s3.{region}.amazonaws.com/{key}``.

    :param bucket: the bucket.
    :param key_pattern: the key or glob.
    :param endpoint_url: the S3 endpoint as ClickHouse reaches it, if not AWS.
    :param region: the bucket's region (AWS only).
    """
    if endpoint_url:
        return f"{endpoint_url.rstrip('/')}/{bucket}/{key_pattern}"
    region = region or "us-east-1"
    return f"https://{bucket}.s3.{region}.amazonaws.com/{key_pattern}"


class S3Source:
    """A boto3 S3 client and the credentials ClickHouse needs, from one ``aws`` connection.

    :param aws_conn_id: the Airflow connection id (``aws_default``); None for an
        anonymous (public-bucket) client with default settings.
    """

    def __init__(self, aws_conn_id: str | None = "aws_default") -> None:
        from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

        self.aws_conn_id = aws_conn_id
        self.hook = AwsBaseHook(aws_conn_id=aws_conn_id, client_type="s3")
        self._session: Any = None
        self._credentials: S3Credentials | None | bool = False

    @property
    def endpoint_url(self) -> str | None:
        """The connection's ``endpoint_url`` (extra), if any."""
        return self.hook.conn_config.endpoint_url

    @property
    def session(self) -> Any:
        if self._session is None:
            self._session = self.hook.get_session()
        return self._session

    def credentials(self) -> S3Credentials | None:
        """Frozen credentials for ClickHouse, registered with the secrets masker; None when anonymous."""
        if self._credentials is False:
            creds = self.session.get_credentials()
            if creds is None:
                self._credentials = None
            else:
                frozen = creds.get_frozen_credentials()
                self._credentials = S3Credentials(
                    access_key_id=frozen.access_key,
                    secret_access_key=frozen.secret_key,
                    session_token=frozen.token or None,
                )
                for secret in self._credentials.secrets():
                    mask_secret(secret)
        return self._credentials  # type: ignore[return-value]

    def client(self) -> Any:
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
