"""Unit tests for :mod:`airflow_provider_s3ch.core.sql` (pure: no server)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_s3ch.core.errors import InvalidRequestError
from airflow_provider_s3ch.core.models import QUERY_LOG_SETTINGS, InsertSettings, LoadPlan, S3Credentials, TableRef
from airflow_provider_s3ch.core.sql import (
    FLUSH_ONE_LOG_SINCE,
    RenderedSQL,
    parseable,
    quote_identifier,
    quote_literal,
    render_flush_logs,
    render_insert,
    render_setting_value,
    render_settings,
    render_table,
)

URL = "https://bucket.s3.eu-west-3.amazonaws.com/data/*.parquet"
KEY_ID = "AKIAIOSFODNN7EXAMPLE"
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
TOKEN = "FwoGZXIvYXdzEXAMPLETOKENvalue//////////"

HOSTILE_SECRETS = [
    "se'cr\\et",
    "x'); DROP TABLE t; --",
    "\\'\\'\\",
    "line\nbreak\ttab\0nul",
    "`back`tick`",
    "ends with backslash \\",
    "unicode ünïcødé ' \\",
]


def plan(**kwargs: Any) -> LoadPlan:
    """A LoadPlan with defaults for the fields a test does not care about.

    :param kwargs: fields to set.
    """
    fields: dict[str, Any] = {
        "table": TableRef(database="db", name="events"),
        "source_url": URL,
        "format": "Parquet",
        "strategy": "single",
        "strategy_reason": "test",
        "settings": InsertSettings(values={"max_insert_threads": 4, "min_insert_block_size_rows": 0}),
        "budget_bytes": 1,
        "budget_reason": "test",
    }
    fields.update(kwargs)
    return LoadPlan(**fields)


def creds(secret: str = SECRET, token: str | None = None, key_id: str = KEY_ID) -> S3Credentials:
    """S3 credentials.

    :param secret: the secret access key.
    :param token: the session token.
    :param key_id: the access key id.
    """
    return S3Credentials(access_key_id=key_id, secret_access_key=secret, session_token=token)


# --- quoting -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "quoted"),
    [
        ("events", "`events`"),
        ("my table", "`my table`"),
        ("back`tick", "`back\\`tick`"),
        ("back\\slash", "`back\\\\slash`"),
        ("quote'", "`quote'`"),
        ("x`; DROP TABLE x; --", "`x\\`; DROP TABLE x; --`"),
        ("\\`", "`\\\\\\``"),
        ("new\nline", "`new\\nline`"),
        ("bell\x07", "`bell\\x07`"),
    ],
)
def test_quote_identifier(name: str, quoted: str) -> None:
    assert quote_identifier(name) == quoted


@pytest.mark.parametrize("name", ["", "nul\0char"])
def test_quote_identifier_rejects(name: str) -> None:
    with pytest.raises(InvalidRequestError):
        quote_identifier(name)


@pytest.mark.parametrize(
    ("value", "quoted"),
    [
        ("abc", "'abc'"),
        ("it's", "'it\\'s'"),
        ("back\\slash", "'back\\\\slash'"),
        ("'; DROP TABLE x; --", "'\\'; DROP TABLE x; --'"),
        ("\\'", "'\\\\\\''"),
        ("tab\tnl\ncr\rnul\0", "'tab\\tnl\\ncr\\rnul\\0'"),
        ("esc\x1b", "'esc\\x1b'"),
        ("`tick`", "'`tick`'"),
        ("", "''"),
    ],
)
def test_quote_literal(value: str, quoted: str) -> None:
    assert quote_literal(value) == quoted


def _unquote(quoted: str) -> str:
    """Decode a quoted token the way ClickHouse's lexer does (for the round-trip test)."""
    simple = {"\\": "\\", "'": "'", "`": "`", "0": "\0", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
    body, out, i = quoted[1:-1], [], 0
    while i < len(body):
        ch = body[i]
        assert ch != quoted[0], "an unescaped quote ends the token early"
        if ch == "\\":
            nxt = body[i + 1]
            if nxt == "x":
                out.append(chr(int(body[i + 2 : i + 4], 16)))
                i += 4
                continue
            out.append(simple[nxt])
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


@pytest.mark.parametrize("value", [*HOSTILE_SECRETS, "x`; DROP TABLE x; --", "\x01\x7f"])
def test_quoting_round_trips(value: str) -> None:
    assert _unquote(quote_literal(value)) == value
    if "\0" not in value:
        assert _unquote(quote_identifier(value)) == value


def test_render_table() -> None:
    assert render_table(TableRef(database="db", name="t")) == "`db`.`t`"
    assert render_table(TableRef(name="t")) == "`t`"
    assert render_table(TableRef(database="my.db", name="a`b")) == "`my.db`.`a\\`b`"


# --- settings ------------------------------------------------------------------------


def test_render_setting_value() -> None:
    assert render_setting_value(4) == "4"
    assert render_setting_value(0.5) == "0.5"
    assert render_setting_value(True) == "1"
    assert render_setting_value("read") == "'read'"
    assert render_setting_value("a'b") == "'a\\'b'"


@pytest.mark.parametrize("value", [float("nan"), float("inf"), None, [1]])
def test_render_setting_value_rejects(value: Any) -> None:
    with pytest.raises(InvalidRequestError):
        render_setting_value(value)


def test_render_settings() -> None:
    assert render_settings({"a": 1, "b": "x"}) == "SETTINGS a = 1, b = 'x'"
    assert render_settings({}) == ""


@pytest.mark.parametrize("name", ["1abc", "a b", "a=1; DROP TABLE x", "", "a-b"])
def test_render_settings_rejects_bad_names(name: str) -> None:
    with pytest.raises(InvalidRequestError):
        render_settings({name: 1})


# --- INSERT --------------------------------------------------------------------------


def test_insert_single_node() -> None:
    rendered = render_insert(plan(), creds())
    assert isinstance(rendered, RenderedSQL)
    assert rendered.sql == (
        f"INSERT INTO `db`.`events` SELECT * FROM s3('{URL}', '{KEY_ID}', '{SECRET}', 'Parquet') "
        "SETTINGS max_insert_threads = 4, min_insert_block_size_rows = 0"
    )
    assert rendered.settings == {**QUERY_LOG_SETTINGS, "max_query_size": 262_144}  # the rest: in the statement


def test_insert_distributed_uses_s3cluster() -> None:
    rendered = render_insert(plan(strategy="distributed", cluster="c3"), creds())
    assert f"FROM s3Cluster('c3', '{URL}', '{KEY_ID}', '{SECRET}', 'Parquet') SETTINGS" in rendered.sql
    assert " s3(" not in rendered.sql


def test_distributed_without_cluster_is_refused() -> None:
    with pytest.raises(InvalidRequestError):
        render_insert(plan(strategy="distributed"), creds())


def test_insert_without_credentials_uses_nosign() -> None:
    rendered = render_insert(plan(), None)
    assert f"FROM s3('{URL}', NOSIGN, 'Parquet') SETTINGS" in rendered.sql
    assert rendered.redacted == rendered.sql
    cluster = render_insert(plan(strategy="distributed", cluster="c3"), None)
    assert f"s3Cluster('c3', '{URL}', NOSIGN, 'Parquet')" in cluster.sql


def test_insert_with_session_token() -> None:
    rendered = render_insert(plan(), creds(token=TOKEN))
    assert f"s3('{URL}', '{KEY_ID}', '{SECRET}', '{TOKEN}', 'Parquet')" in rendered.sql


def test_structure_and_compression() -> None:
    rendered = render_insert(plan(format="CSV", structure="a UInt8, b String", compression="gzip"), None)
    assert f"s3('{URL}', NOSIGN, 'CSV', 'a UInt8, b String', 'gzip')" in rendered.sql


def test_structure_without_compression() -> None:
    rendered = render_insert(plan(format="CSV", structure="a UInt8"), creds())
    assert f"'{SECRET}', 'CSV', 'a UInt8') SETTINGS" in rendered.sql


def test_compression_without_structure_uses_auto() -> None:
    rendered = render_insert(plan(format="CSV", compression="zstd"), creds(token=TOKEN))
    assert f"'{TOKEN}', 'CSV', 'auto', 'zstd') SETTINGS" in rendered.sql


def test_insert_into_target() -> None:
    rendered = render_insert(plan(), None, target=TableRef(database="db", name="events_staging"))
    assert rendered.sql.startswith("INSERT INTO `db`.`events_staging` SELECT")


def test_insert_without_settings() -> None:
    rendered = render_insert(plan(settings=InsertSettings()), None)
    assert rendered.sql.endswith("'Parquet')")


def test_hostile_table_and_url_are_quoted() -> None:
    p = plan(table=TableRef(database="db", name="x`; DROP TABLE y; --"), source_url="https://h/a'); DROP TABLE z; --")
    sql = render_insert(p, None).sql
    assert sql.startswith("INSERT INTO `db`.`x\\`; DROP TABLE y; --` SELECT")
    assert "s3('https://h/a\\'); DROP TABLE z; --', NOSIGN" in sql


# --- redaction -----------------------------------------------------------------------


def test_redacted_form() -> None:
    rendered = render_insert(plan(), creds(token=TOKEN))
    assert f"s3('{URL}', 'AKIA…', '[redacted]', '[redacted]', 'Parquet')" in rendered.redacted
    assert SECRET not in rendered.redacted
    assert TOKEN not in rendered.redacted
    assert KEY_ID not in rendered.redacted


def test_short_key_id_is_hidden() -> None:
    rendered = render_insert(plan(), creds(key_id="minio"))
    assert "'[key id]', '[redacted]'" in rendered.redacted
    assert "minio" not in rendered.redacted


@pytest.mark.parametrize("secret", HOSTILE_SECRETS)
def test_hostile_secrets_never_leak(secret: str) -> None:
    token = "tok" + secret[::-1]
    rendered = render_insert(plan(strategy="distributed", cluster="c3"), creds(secret=secret, token=token))
    for text in (secret, token, quote_literal(secret)[1:-1], quote_literal(token)[1:-1]):
        assert text not in rendered.redacted
    assert quote_literal(secret) in rendered.sql
    assert quote_literal(token) in rendered.sql


def test_secret_repeated_elsewhere_is_scrubbed() -> None:
    secret = "s3cr3t-in-the-url-too"
    rendered = render_insert(plan(source_url=f"https://h/{secret}/*.csv"), creds(secret=secret))
    assert secret not in rendered.redacted


def test_repr_shows_only_the_redacted_sql() -> None:
    rendered = render_insert(plan(), creds(token=TOKEN))
    for text in (repr(rendered), str(rendered)):
        assert SECRET not in text
        assert TOKEN not in text


def test_a_statement_longer_than_max_query_size_still_parses() -> None:
    """A statement over max_query_size fails to parse and is logged raw: credentials included. The limit
    that parsing obeys travels in the protocol (settings in the SETTINGS clause apply after parsing)."""
    short = render_insert(plan(), creds(token=TOKEN))
    assert short.settings["max_query_size"] == 262_144  # whatever the server's profile says
    huge = render_insert(plan(settings=InsertSettings(values={"log_comment": "x" * 300_000})), creds(token=TOKEN))
    assert huge.settings["max_query_size"] == len(huge.sql.encode()) + 1 and len(huge.sql) > 300_000
    wide = render_insert(plan(format="CSV", structure=", ".join(f"c{i} UInt8" for i in range(30_000))), creds())
    assert wide.settings["max_query_size"] == len(wide.sql.encode()) + 1
    tiny = render_insert(plan(settings=InsertSettings(values={"max_query_size": 10})), creds())
    assert tiny.settings["max_query_size"] == 262_144 and tiny.sql.endswith("SETTINGS max_query_size = 10")
    for r in (short, huge, wide, tiny):
        assert SECRET not in r.redacted and TOKEN not in r.redacted


def test_parseable_keeps_what_decides_parsing_where_a_statement_parses() -> None:
    sent = parseable({"max_parser_depth": 1, "max_parser_backtracks": "1", "dialect": "kusto", "max_query_size": 10,
                      "max_threads": 2}, 300_000)
    assert sent == {"max_parser_depth": 1000, "max_parser_backtracks": 1_000_000, "dialect": "clickhouse",
                    "max_query_size": 300_000, "max_threads": 2}
    assert parseable({}, 100) == {"max_query_size": 262_144}
    assert parseable({"max_query_size": 500_000}, 300_000)["max_query_size"] == 500_000


def test_a_long_statement_is_shortened_for_logs_with_the_rest_counted() -> None:
    from airflow_provider_s3ch.core.sql_summary import shorten

    assert shorten("abc", limit=5) == "abc"
    assert shorten("x" * 10_005, limit=4) == "xxxx… [10,001 more characters]"


@given(major=st.integers(0, 99), minor=st.integers(0, 12))
def test_the_flush_names_the_query_log_from_the_version_that_can_and_flushes_every_log_before(major, minor) -> None:
    sql = render_flush_logs((major, minor))
    assert sql == ("SYSTEM FLUSH LOGS query_log" if (major, minor) >= FLUSH_ONE_LOG_SINCE else "SYSTEM FLUSH LOGS")
    assert render_flush_logs(None) == "SYSTEM FLUSH LOGS"
