"""How the server reads the bucket: with the worker's keys in each statement, or with credentials that stay
on the server (docs/connections.md). Pure: no I/O.

``forward`` (default)
    the AWS connection's keys, frozen on the worker, go into each ``s3()`` call (ClickHouse masks them in
    ``system.query_log``, but they cross the wire and reach the server's memory).
``server``
    no keys and no ``NOSIGN``: the server signs with its own credentials (an instance or pod role, its
    environment, its ``<s3>`` config: ``use_environment_credentials``), or reads a public bucket; with
    ``role_arn``, ClickHouse Cloud assumes that IAM role (``extra_credentials(role_arn = …)``).
``named_collection``
    ``s3(<collection>, url = …, format = …)``: the keys (and any other S3 options) are in a named
    collection on the server; the statement names the collection only.

The worker still lists the bucket with its AWS connection in every mode.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, model_validator

from airflow_provider_s3ch.core.errors import InvalidRequestError, S3AccessDeniedError

S3CredentialsMode = Literal["forward", "server", "named_collection"]

#: A named collection's name as a bare identifier (what ``CREATE NAMED COLLECTION`` and the config take).
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")

#: An IAM role's ARN (any AWS partition), as ClickHouse Cloud's ``extra_credentials(role_arn = …)`` takes it.
ROLE_ARN_RE = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[A-Za-z0-9+=,.@_/-]{1,512}$")


class S3Access(BaseModel):
    """How the server reads the bucket (``s3_credentials``, ``named_collection``, ``role_arn``)."""

    model_config = ConfigDict(frozen=True)

    mode: S3CredentialsMode = "forward"
    named_collection: str | None = None
    role_arn: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> S3Access:
        if self.mode == "named_collection":
            if not self.named_collection:
                raise InvalidRequestError(
                    "s3_credentials='named_collection' needs named_collection=<the collection's name on the server>, "
                    "e.g. named_collection='s3_events' (CREATE NAMED COLLECTION s3_events AS access_key_id = …)")
            if not NAME_RE.match(self.named_collection):
                raise InvalidRequestError(
                    f"named_collection={self.named_collection!r} is not a named collection's name: letters, digits "
                    "and '_', not starting with a digit (at most 128)")
        elif self.named_collection is not None:
            raise InvalidRequestError(
                f"named_collection={self.named_collection!r} is read only with s3_credentials='named_collection' "
                f"(s3_credentials is {self.mode!r}); give both, or leave named_collection out")
        if self.role_arn is not None:
            if self.mode != "server":
                raise InvalidRequestError(
                    f"role_arn needs s3_credentials='server' (it is {self.mode!r}): the server assumes the role, "
                    "and no keys are sent")
            if not ROLE_ARN_RE.match(self.role_arn):
                raise InvalidRequestError(
                    f"role_arn={self.role_arn!r} is not an IAM role ARN; give one like "
                    "'arn:aws:iam::123456789012:role/clickhouse-s3-read'")
        return self

    @property
    def sends_keys(self) -> bool:
        return self.mode == "forward"

    def describe(self) -> str:
        """What the plan and the log say of it."""
        if self.mode == "named_collection":
            return (f"named collection {self.named_collection} on the server (s3_credentials='named_collection'): "
                    "no keys in the statements")
        if self.mode == "server":
            how = (f"ClickHouse Cloud assumes IAM role {self.role_arn} (extra_credentials)" if self.role_arn else
                   "the server's own credentials (its role, environment or <s3> config: use_environment_credentials)")
            return f"{how} (s3_credentials='server'): no keys in the statements"
        return ("the AWS connection's keys, frozen on the worker, in each statement (s3_credentials='forward'; "
                "ClickHouse masks them in system.query_log)")

    def hint(self, bucket: str | None = None) -> str:
        """What to fix when S3 refuses the server's read of the bucket, by the credentials it read with.

        :param bucket: the bucket, named in the hint.
        """
        it = f"bucket {bucket}" if bucket else "the bucket"
        arn = f"arn:aws:s3:::{bucket}" if bucket else "the bucket"
        if self.mode == "named_collection":
            return (f"the server read {it} through named collection {self.named_collection} "
                    "(s3_credentials='named_collection'): fix the collection's keys so that they may read it "
                    f"(s3:GetObject, s3:ListBucket on {arn}), and check that the collection exists on the server "
                    f"and that the user has GRANT NAMED COLLECTION ON {self.named_collection}")
        if self.mode == "server":
            if self.role_arn:
                return (f"the server read {it} as IAM role {self.role_arn} (s3_credentials='server'): let the "
                        "ClickHouse service assume the role (the role's trust policy) and give the role "
                        f"s3:GetObject and s3:ListBucket on {arn}")
            return (f"the server read {it} with its own credentials (s3_credentials='server'): it has none that "
                    f"may read it; give the ClickHouse server's own role or keys read access (s3:GetObject, "
                    f"s3:ListBucket on {arn}; use_environment_credentials, an <s3> endpoint config), or use "
                    "s3_credentials='named_collection', or 'forward' to send the worker's keys")
        return (f"the server read {it} with the AWS connection's keys (s3_credentials='forward'): they lack "
                f"s3:GetObject (and s3:ListBucket, for a glob) on {arn}; grant them, or fix the connection's keys")


#: What the server's message says when it could not read the bucket with the credentials it had.
_REFUSED = re.compile(r"HTTP response code: 40[13]|access ?denied|NAMED COLLECTION|credentials|InvalidAccessKeyId|"
                      r"SignatureDoesNotMatch|AssumeRole|error 499|No response body", re.IGNORECASE)


#: A 404: the file is gone, whatever the credentials (no refusal's hint).
_GONE = re.compile(r"HTTP response code: 404\b|\bNoSuchKey\b", re.IGNORECASE)


def with_hint(exc: BaseException, access: S3Access, bucket: str | None = None) -> BaseException | None:
    """``exc`` again with :meth:`S3Access.hint` appended: when S3 refused the server's read
    (:class:`~airflow_provider_s3ch.core.errors.S3AccessDeniedError`, in every mode), or, where the keys stay on
    the server, when it failed in a way a refusal may (S3 answers a refused read with 403, sometimes with no
    body, which the server's message does not tell from other failures); None otherwise (the error stands).

    :param exc: the load's error.
    :param access: how the server read the bucket.
    :param bucket: the bucket, named in the hint.
    """
    if not isinstance(exc, Exception):
        return None
    if isinstance(exc, S3AccessDeniedError):
        text = f"{exc}; {access.hint(bucket)}"
    elif access.sends_keys or not _REFUSED.search(str(exc)) or _GONE.search(str(exc)):
        return None
    else:
        text = f"{exc}; if S3 refused the read: {access.hint(bucket)}"
    try:
        return type(exc)(text)
    except TypeError:
        return None
