"""``s3_credentials``: the arguments, and the ``s3()`` call each mode renders (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_s3ch.core.access import S3Access, with_hint
from airflow_provider_s3ch.core.errors import InvalidRequestError
from airflow_provider_s3ch.core.models import LoadPlan, LoadRequest, S3Credentials
from airflow_provider_s3ch.core.sql import render_insert, render_source
from airflow_provider_s3ch.errors import LoadError

KEYS = S3Credentials(access_key_id="AKIAEXAMPLEKEYID0000", secret_access_key="s3cr3t-value", session_token="tok3n")
ARN = "arn:aws:iam::123456789012:role/clickhouse-s3-read"


def plan(access: S3Access | None, **kw: object) -> LoadPlan:
    return LoadPlan.model_validate({
        "table": {"database": "db", "name": "t"}, "source_url": "https://b.s3.amazonaws.com/in/{a,b}.csv",
        "format": "CSV", "strategy": "single", "strategy_reason": "", "settings": {}, "budget_bytes": 1,
        "budget_reason": "", "access": access.model_dump() if access else None, **kw,
    })


def test_forward_sends_the_keys_and_the_other_modes_none() -> None:
    assert render_source(plan(None), KEYS) == (
        "s3('https://b.s3.amazonaws.com/in/{a,b}.csv', 'AKIAEXAMPLEKEYID0000', 's3cr3t-value', 'tok3n', 'CSV')")
    assert render_source(plan(S3Access(mode="server")), KEYS) == "s3('https://b.s3.amazonaws.com/in/{a,b}.csv', 'CSV')"
    assert render_source(plan(S3Access(mode="server", role_arn=ARN), compression="gzip"), KEYS) == (
        "s3('https://b.s3.amazonaws.com/in/{a,b}.csv', 'CSV', 'auto', 'gzip', "
        f"extra_credentials(role_arn = '{ARN}'))")
    assert render_source(plan(S3Access(mode="named_collection", named_collection="s3_events"),
                              structure="a UInt8", compression="zstd"), KEYS) == (
        "s3(`s3_events`, url = 'https://b.s3.amazonaws.com/in/{a,b}.csv', format = 'CSV', structure = 'a UInt8', "
        "compression_method = 'zstd')")
    distributed = plan(S3Access(mode="named_collection", named_collection="nc"), strategy="distributed", cluster="c")
    assert render_source(distributed, KEYS).startswith("s3Cluster('c', `nc`, url = ")


@given(st.sampled_from([S3Access(mode="server"), S3Access(mode="server", role_arn=ARN),
                        S3Access(mode="named_collection", named_collection="nc")]),
       st.text(min_size=16, max_size=40, alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"),
       st.text(min_size=8, max_size=40, alphabet="abcdefghijklmnopqrstuvwxyz0123456789/+"))
def test_no_key_material_in_a_statement_that_keeps_the_keys_on_the_server(access, key_id, secret) -> None:
    key_id, secret = f"AKIAZ{key_id}", f"sk+{secret}"  # no text of the statement looks like them
    keys = S3Credentials(access_key_id=key_id, secret_access_key=secret)
    rendered = render_insert(plan(access), keys)
    for text in (rendered.sql, rendered.redacted):
        assert key_id not in text and secret not in text and "NOSIGN" not in text


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"s3_credentials": "named_collection"}, "needs named_collection="),
    ({"s3_credentials": "named_collection", "named_collection": "x y"}, "is not a named collection's name"),
    ({"s3_credentials": "named_collection", "named_collection": "nc`; DROP"}, "is not a named collection's name"),
    ({"named_collection": "nc"}, "only with s3_credentials='named_collection'"),
    ({"role_arn": ARN}, "role_arn needs s3_credentials='server'"),
    ({"s3_credentials": "server", "role_arn": "arn:aws:iam::1:role/x'"}, "is not an IAM role ARN"),
    ({"s3_credentials": "keys"}, "'forward', 'server' or 'named_collection'"),
])
def test_arguments_that_do_not_fit_fail_before_anything_runs(kwargs: dict, message: str) -> None:
    with pytest.raises(InvalidRequestError, match=message):
        LoadRequest.from_arguments(s3_uri="s3://b/k.csv", table="t", **kwargs)


def test_a_refused_read_names_the_option_and_what_the_server_lacks() -> None:
    refused = LoadError("ClickHouse error 499: HTTP response code: 403")
    assert with_hint(refused, S3Access()) is None  # forward: the error stands as it is
    hinted = with_hint(refused, S3Access(mode="named_collection", named_collection="nc"))
    assert isinstance(hinted, LoadError) and "GRANT NAMED COLLECTION ON nc" in str(hinted)
    assert "assume the role" in str(with_hint(refused, S3Access(mode="server", role_arn=ARN)))
    assert with_hint(LoadError("Cannot parse input"), S3Access(mode="server")) is None


@pytest.mark.parametrize(("access", "says"), [
    (S3Access(), "AWS connection's keys (s3_credentials='forward'): they lack s3:GetObject"),
    (S3Access(mode="server"), "give the ClickHouse server's own role or keys read access"),
    (S3Access(mode="server", role_arn=ARN), "let the ClickHouse service assume the role"),
    (S3Access(mode="named_collection", named_collection="nc"), "fix the collection's keys"),
])
def test_a_refusal_says_what_to_fix_for_the_credentials_in_use_and_names_the_bucket(access, says) -> None:
    from airflow_provider_s3ch.errors import S3AccessDeniedError

    refused = S3AccessDeniedError("ClickHouse error 499 (S3 refused the server's read: access denied): Access Denied")
    hinted = with_hint(refused, access, "events-raw")
    assert isinstance(hinted, S3AccessDeniedError) and says in str(hinted)
    assert "bucket events-raw" in str(hinted) and "arn:aws:s3:::events-raw" in str(hinted)
