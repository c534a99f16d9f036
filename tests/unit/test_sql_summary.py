"""The statement in the INFO log: short, with the keys counted and the settings left to their own lines."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_s3ch.core.sql_summary import sql_summary

keys = st.lists(st.from_regex(r"[a-z0-9/_-]{1,20}\.csv", fullmatch=True), min_size=1, max_size=300, unique=True)


@given(keys=keys)
def test_a_key_list_is_cut_to_its_first_keys_and_a_count(keys: list[str]) -> None:
    sql = (f"INSERT INTO `db`.`t` SELECT * FROM s3('http://h/b/{{{','.join(keys)}}}', 'k', '[redacted]', 'CSV') "
           "SETTINGS max_insert_threads = 2, log_comment = 's3ch/1 x {\"cap\":1,\"step\":\"plan\"}'")
    text = sql_summary(sql)
    assert text.startswith("INSERT INTO `db`.`t` SELECT * FROM s3('http://h/b/{" + ",".join(keys[:3]))
    assert text.endswith("'CSV') SETTINGS … (the settings above)") and "log_comment" not in text
    assert (f"… {len(keys) - 3} more keys}}" in text) == (len(keys) > 3)
    assert len(text) < 400


def test_settings_inside_a_quoted_key_stay() -> None:
    sql = "INSERT INTO t SELECT * FROM s3('http://h/b/a SETTINGS b.csv', 'CSV')"
    assert sql_summary(sql) == sql
