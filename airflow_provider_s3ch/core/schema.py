"""The files' columns against the target's, before anything is loaded. Pure.

Left alone, ClickHouse fills in what a file lacks without a word. ``INSERT INTO t SELECT * FROM
s3(…)`` reads the files with the table's structure
(``use_structure_from_insertion_table_in_table_functions``), matching columns by name: a table
column the file lacks loads as its default (``input_format_parquet_allow_missing_columns`` and its
kin), a file column the table lacks is skipped. A Parquet file with columns ``x, y, z`` loaded
into ``(id, name)`` writes rows of ``(0, '')``. With a ``structure`` the file is read by that
structure (a structure column a Parquet or ``…WithNames`` file lacks loads as its default), and
``INSERT … SELECT *`` fills the table's columns *by position*, whatever the names.

So before a load the operator asks the server for the columns of one sample file, the first
that is not empty (``DESCRIBE s3(…)``: ClickHouse's own schema inference), or for its parse of
``structure``, and for the target's columns (``system.columns``; a Distributed target's own
columns), and :func:`check_schema` compares them:

- **Which table columns a file may omit**: those with an expression of their own, ``DEFAULT``,
  ``MATERIALIZED``, ``ALIAS`` or ``EPHEMERAL`` (:data:`OMITTABLE_KINDS`). Every other column is
  required, ``Nullable`` ones too: a Nullable column the file lacks would be NULL in every row,
  the same silent default; declare it ``DEFAULT NULL`` to make it optional.
- **File columns the table lacks** are an error (their values would be dropped), unless
  ``schema_check='ignore_extra'``. A file column named like a ``MATERIALIZED`` or ``ALIAS`` column
  counts as one the table lacks: the table computes that column and the file's values are dropped.
- **Types**, conservatively, and only where the file declares them (:data:`TYPED_FORMATS`;
  inference on CSV or JSON guesses from the first rows and the server parses text into the
  table's types anyway). ``Nullable`` and ``LowCardinality`` are looked through: ``Nullable(T)``
  into ``T`` is fine (a NULL loads as the column's default, ``input_format_null_as_default``; set
  that setting to 0 to fail on NULLs instead). A nested type (``Array``, ``Map``, ``Tuple``)
  against a plain one is an error: the server cannot read one as the other. Text into a number is
  a warning (the server parses each value: numeric text loads, other text fails the load), except
  into a ``Nullable`` number, where it is an error (measured on Parquet: text that is not a number
  loads as NULL there, without an error), and
  so is a float into an integer (the fraction is dropped: 1.5 loads as 1). Everything else is the
  server's to convert.
- **Hive-style path columns** (``…/day=01/…``, :func:`path_columns`): the server lists them with
  the file's columns (``use_hive_partitioning``) and fills table columns of those names from the
  path; a table may lack them, and their types (guessed from the path's text) are not compared.
- **With a structure**, the structure's columns are compared with the table's by position (the
  columns ``INSERT … SELECT`` fills: those without an expression, or with a ``DEFAULT``): another
  count is an error, and so is a structure column named like another table column (the values
  would land in the wrong column). For formats with names, each structure column must be in the file.

A problem is a :class:`SchemaError` under ``schema_check='strict'`` (the default) or
``'ignore_extra'``, and a warning under ``'warn'``; ``'off'`` skips the check. Formats without
column names are not checked without a ``structure``: their columns are matched by position.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import BaseModel, Field

from airflow_provider_s3ch.core.errors import SchemaError
from airflow_provider_s3ch.core.formats import NAMELESS_FORMATS, TYPED_FORMATS
from airflow_provider_s3ch.core.glob import key_url
from airflow_provider_s3ch.core.manifest import first_file
from airflow_provider_s3ch.core.models import Check, LoadPlan, Manifest, SchemaChange, SchemaPolicy, SettingValue
from airflow_provider_s3ch.core.schema_types import type_problem

CHECK_NAME = "schema"

#: How many rows the check's ``DESCRIBE`` reads of a file whose header names its columns (``…WithNames``,
#: ``…WithNamesAndTypes``): the names (and declared types) are the header's, and the types the server infers
#: from the rows of a text format are not compared. ClickHouse reads 25,000 rows by default: 0.3 s of a
#: gzip'd CSV file on two cores, on every load of new files; 100 rows took 20 ms (docs/benchmarks.md).
HEADER_SAMPLE_ROWS = 100

#: The target's columns, in order, with what makes a column omittable.
COLUMNS_SQL = (
    "SELECT name, type, default_kind FROM system.columns WHERE database = %(d)s AND table = %(t)s ORDER BY position"
)

#: ``system.columns.default_kind`` of the table columns a file may omit: they have an expression.
OMITTABLE_KINDS = frozenset({"DEFAULT", "MATERIALIZED", "ALIAS", "EPHEMERAL"})

#: Columns the table computes: an insert gives them no value.
COMPUTED_KINDS = frozenset({"MATERIALIZED", "ALIAS"})

#: The columns ``INSERT INTO t SELECT *`` fills by position (measured: not EPHEMERAL ones either).
POSITIONAL_KINDS = frozenset({"", "DEFAULT"})

#: The settings that make a format's reader match column names regardless of case.
CASE_INSENSITIVE_SETTINGS = tuple(
    f"input_format_{fmt}_case_insensitive_column_matching" for fmt in ("parquet", "orc", "arrow")
)


class Column(BaseModel):
    """A column as ``system.columns`` or ``DESCRIBE`` lists it."""

    name: str
    type: str
    default_kind: str = ""

    def __str__(self) -> str:
        return f"{self.name} {self.type}"


class SchemaReads(BaseModel):
    """What the shell reads for the check: the sample file's columns, the structure's, or nothing."""

    file: bool = False
    structure: bool = False
    skipped: Check | None = None


class SchemaComparison(BaseModel):
    """The problems one comparison found: errors fail the load, warnings are reported, notes inform."""

    errors: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)

    def extend(self, other: SchemaComparison) -> None:
        self.errors += other.errors
        self.warnings += other.warnings
        self.notes += other.notes


def schema_reads(policy: SchemaPolicy, fmt: str, structure: str | None) -> SchemaReads:
    """Which columns the check needs, or why it is skipped.

    :param policy: the request's ``schema_check``.
    :param fmt: the format.
    :param structure: the request's structure.
    """
    if policy == "off":
        return SchemaReads(skipped=Check(name=CHECK_NAME, status="skipped", message="schema_check='off'"))
    named = fmt.lower() not in NAMELESS_FORMATS
    if structure is None and not named:
        return SchemaReads(skipped=Check(
            name=CHECK_NAME, status="skipped",
            message=f"format {fmt} carries no column names, so there are none to compare with the table's; "
            "give structure='col Type, ...' to have the columns checked",
        ))  # fmt: skip
    return SchemaReads(file=named, structure=structure is not None)


#: The user's settings that a ``DESCRIBE`` of files takes: those that say how the files are read and their
#: columns inferred (formats, schema inference, the S3 reads, dates and times in text, archives, Hive
#: partitions). The rest (threads, memory, the insert's blocks, deduplication, ...) apply to the insert only.
READ_SETTING_PREFIXES = ("input_format_", "schema_inference_", "format_", "s3_", "date_time_", "cast_")
READ_SETTINGS = frozenset({
    "column_names_for_schema_inference", "use_hive_partitioning", "allow_archive_path_syntax", "session_timezone",
    "enable_url_encoding", "engine_file_skip_empty_files", "engine_url_skip_empty_files",
    "allow_experimental_object_type", "allow_experimental_json_type", "enable_json_type",
    "allow_experimental_dynamic_type", "allow_experimental_variant_type", "allow_suspicious_low_cardinality_types",
})


def read_settings(settings: Mapping[str, SettingValue]) -> dict[str, SettingValue]:
    """The user's settings that apply to reading the files and inferring their columns (a ``DESCRIBE``); not
    those of the insert (:data:`READ_SETTING_PREFIXES`, :data:`READ_SETTINGS`).

    :param settings: the load's settings.
    """
    return {name: value for name, value in settings.items()
            if name in READ_SETTINGS or name.startswith(READ_SETTING_PREFIXES)}


def describe_settings(fmt: str, settings: Mapping[str, SettingValue]) -> dict[str, SettingValue]:
    """The settings of the check's ``DESCRIBE`` of the sample file: the load's that apply to reading the files
    (:func:`read_settings`), and for a format whose header names the columns, at most :data:`HEADER_SAMPLE_ROWS`
    rows read (unless the load's settings say).

    :param fmt: the format.
    :param settings: the load's settings.
    """
    reading = read_settings(settings)
    if not fmt.lower().endswith(("withnames", "withnamesandtypes")):
        return reading
    return {"input_format_max_rows_to_read_for_schema_inference": HEADER_SAMPLE_ROWS, **reading}


def sample_file(plan: LoadPlan, manifest: Manifest) -> tuple[str, str] | None:
    """The file the check describes: the manifest's first that is not empty, as its ``s3://`` name and
    its URL as the plan reads it (:func:`~airflow_provider_s3ch.core.glob.key_url`);
    None when every file is empty.

    :param plan: the plan.
    :param manifest: the objects.
    """
    first = first_file(manifest.objects)
    if first is None:
        return None
    return f"s3://{manifest.bucket}/{first.key}", key_url(plan.source_url, manifest.pattern, first.key)


def unchecked(reason: str) -> Check:
    """The check when there is nothing to compare: every file is empty, or the server could not describe
    the sample (a CSV with a header and no rows has no types to infer); the load itself decides then.

    :param reason: why.
    """
    return Check(name=CHECK_NAME, status="warn", message=f"columns not checked: {reason}")


def path_columns(file: str) -> set[str]:
    """The Hive-style partition columns of a file's key (``…/day=01/part.csv`` has ``day``).

    Under ``use_hive_partitioning`` (on by default) the server's ``DESCRIBE`` lists them after the
    file's own columns and the insert fills table columns of those names from the path; a table
    without them simply does not load them. Their types are guesses from the path's text.

    :param file: ``s3://bucket/key``.
    """
    segments = file.split("/")[3:-1]
    return {seg.partition("=")[0] for seg in segments if seg.partition("=")[0] and seg.partition("=")[1]}


def case_insensitive(settings: dict[str, SettingValue]) -> bool:
    """Whether the request's settings make the reader match column names regardless of case."""
    return any(str(settings.get(name, 0)).strip().lower() in {"1", "true"} for name in CASE_INSENSITIVE_SETTINGS)


# ---------------------------------------------------------------------- types


def _types(pairs: Sequence[tuple[Column, Column]], label: str) -> SchemaComparison:
    """Type problems of (source, target) column pairs."""
    found = SchemaComparison()
    for source, target in pairs:
        problem = type_problem(source.type, target.type)
        if problem is not None:
            kind, why = problem
            text = f"{label} column {source.name}: {why}"
            (found.errors if kind == "error" else found.warnings).append(text)
    return found


# ---------------------------------------------------------------------- comparisons


#: How many columns a message lists before it says how many more there are.
LISTED_COLUMNS = 20


def _listing(items: Sequence[str], sep: str = ", ") -> str:
    shown = sep.join(items[:LISTED_COLUMNS])
    return f"{shown} and {len(items) - LISTED_COLUMNS} more" if len(items) > LISTED_COLUMNS else shown


def _names(columns: Sequence[Column]) -> str:
    return _listing([c.name for c in columns])


def compare_by_name(
    file: Sequence[Column], target: Sequence[Column], *, typed: bool, ignore_extra: bool = False,
    ignore_case: bool = False, from_path: set[str] | frozenset[str] = frozenset(),
) -> SchemaComparison:
    """The file's columns against the table's, by name, as ``INSERT … SELECT * FROM s3(…)`` matches them.

    :param file: the file's columns (``DESCRIBE``).
    :param target: the table's columns (``system.columns``, with ``default_kind``).
    :param typed: whether the file declares its types (compare them).
    :param ignore_extra: file columns the table lacks are noted, not an error.
    :param ignore_case: the reader matches names regardless of case.
    :param from_path: the columns that come from the key's path (:func:`path_columns`): a table may lack them.
    """
    key = (lambda name: name.lower()) if ignore_case else (lambda name: name)
    by_name = {key(c.name): c for c in target}
    in_file = {key(c.name) for c in file}
    found = SchemaComparison()
    unloaded = unloaded_columns(file, target, ignore_case=ignore_case)
    extra = [c for c in unloaded if c.name not in from_path]
    if len(extra) < len(unloaded):
        found.notes.append(f"path columns {_names([c for c in unloaded if c.name in from_path])} are not in the table")
    missing = [c for c in target if c.default_kind not in OMITTABLE_KINDS and key(c.name) not in in_file]
    defaulted = [c for c in target if c.default_kind in {"DEFAULT", "EPHEMERAL"} and key(c.name) not in in_file]
    if missing:
        hint = _case_hint(missing, extra)
        found.errors.append(
            f"table columns {_listing([str(c) for c in missing])} are not in the file and have no DEFAULT: "
            f"every row would load their type's default{hint}; add them to the files, give them a DEFAULT in "
            "the table, or give structure='…' naming the file's columns in the table's order "
            "(the insert then fills the table by position)"
        )
    if extra:
        computed = [c.name for c in extra if key(c.name) in by_name]
        text = (
            f"file columns {_names(extra)} are not columns the table loads"
            + (f" ({', '.join(computed)}: MATERIALIZED or ALIAS, the table computes them)" if computed else "")
            + ": their values would be dropped"
        )
        if ignore_extra:
            found.notes.append(f"{text} (on_schema_change='ignore_extra')")
        else:
            found.errors.append(
                f"{text}; pass on_schema_change='add_columns' to add them to the table, or "
                "on_schema_change='ignore_extra' to leave them out"
            )
    if defaulted:
        found.notes.append(f"{_names(defaulted)} not in the file: filled by the table's DEFAULT")
    if typed:
        skip = {c.name for c in unloaded} | from_path
        found.extend(_types([(c, by_name[key(c.name)]) for c in file if c.name not in skip], "file"))
    return found


def unloaded_columns(file: Sequence[Column], target: Sequence[Column], *, ignore_case: bool = False) -> list[Column]:
    """The file's columns the insert does not load: those the table lacks, or computes (MATERIALIZED, ALIAS).

    :param file: the file's columns.
    :param target: the table's columns.
    :param ignore_case: the reader matches names regardless of case.
    """
    key = (lambda name: name.lower()) if ignore_case else (lambda name: name)
    by_name = {key(c.name): c for c in target}
    return [c for c in file if key(c.name) not in by_name or by_name[key(c.name)].default_kind in COMPUTED_KINDS]


def left_out(
    file_columns: Sequence[Column], target: Sequence[Column], *, file: str,
    settings: dict[str, SettingValue] | None = None,
) -> list[str]:
    """The names of the sample file's columns the load leaves out (the table lacks them; path columns aside).

    :param file_columns: the file's columns.
    :param target: the table's columns.
    :param file: the sample file, ``s3://bucket/key`` (its path columns are not left out: the key holds them).
    :param settings: the request's settings (case-insensitive readers).
    """
    from_path = path_columns(file)
    unloaded = unloaded_columns(file_columns, target, ignore_case=case_insensitive(settings or {}))
    return [c.name for c in unloaded if c.name not in from_path]


def _case_hint(missing: Sequence[Column], extra: Sequence[Column]) -> str:
    by_lower = {e.name.lower(): e.name for e in extra}
    pairs = [(by_lower[m.name.lower()], m.name) for m in missing if m.name.lower() in by_lower]
    if not pairs:
        return ""
    return f" (names are case-sensitive: {_listing([f'file {a!r} vs table {b!r}' for a, b in pairs])})"


def compare_by_position(structure: Sequence[Column], target: Sequence[Column]) -> SchemaComparison:
    """The structure's columns against the table's, by position, as ``INSERT … SELECT *`` fills them.

    :param structure: the structure's columns (``DESCRIBE`` with the structure).
    :param target: the table's columns.
    """
    slots = [c for c in target if c.default_kind in POSITIONAL_KINDS]
    found = SchemaComparison()
    if len(structure) != len(slots):
        found.errors.append(
            f"structure has {len(structure)} columns ({_names(structure)}) but the insert fills the table's "
            f"{len(slots)} by position ({_names(slots)}); give structure one column for each, in that order"
        )
        return found
    names = {c.name for c in slots}
    pairs = list(zip(structure, slots, strict=True))
    crossed = [(s, t) for s, t in pairs if s.name != t.name and s.name in names]
    if crossed:
        shown = _listing([f"{s.name} into {t.name}" for s, t in crossed])
        found.errors.append(
            f"the insert fills the table's columns by position, so structure columns would land in other table "
            f"columns ({shown}); order structure as the table: {_names(slots)}"
        )
    renamed = [(s, t) for s, t in pairs if s.name != t.name and s.name not in names]
    if renamed:
        found.notes.append("by position: " + _listing([f"{s.name} into {t.name}" for s, t in renamed]))
    found.extend(_types(pairs, "structure"))
    return found


def structure_in_file(
    structure: Sequence[Column], file: Sequence[Column], *, typed: bool, ignore_case: bool = False,
    from_path: set[str] | frozenset[str] = frozenset(),
) -> SchemaComparison:
    """The structure's columns against the file's, by name, as a reader of a format with names reads them.

    :param structure: the structure's columns.
    :param file: the file's columns.
    :param typed: whether the file declares its types (compare them).
    :param ignore_case: the reader matches names regardless of case.
    :param from_path: the columns that come from the key's path: their types are not compared.
    """
    key = (lambda name: name.lower()) if ignore_case else (lambda name: name)
    by_name = {key(c.name): c for c in file}
    found = SchemaComparison()
    absent = [c for c in structure if key(c.name) not in by_name]
    if absent:
        found.errors.append(
            f"structure columns {_names(absent)} are not in the file (it has {_names(file)}): every row would load "
            "their type's default; name the file's columns in structure"
        )
    if typed:
        found.extend(_types(
            [(by_name[key(c.name)], c) for c in structure if key(c.name) in by_name and c.name not in from_path], "file"
        ))  # fmt: skip
    return found


def check_schema(
    target: Sequence[Column], *, file: str, table: str, fmt: str, policy: SchemaPolicy,
    file_columns: Sequence[Column] | None = None, structure_columns: Sequence[Column] | None = None,
    settings: dict[str, SettingValue] | None = None, on_schema_change: SchemaChange = "fail",
) -> Check:
    """Compare the sample file's columns (or the structure's) with the target's.

    :param target: the table's columns (``system.columns``: name, type, default_kind).
    :param file: the sample file, ``s3://bucket/key``, for the messages and its path columns.
    :param table: the target, for the messages.
    :param fmt: the format.
    :param policy: the request's ``schema_check``.
    :param file_columns: the file's columns from the server's schema inference (formats with names).
    :param structure_columns: the structure's columns as the server parses it (when one is given).
    :param settings: the request's settings (a case-insensitive reader matches names regardless of case).
    :param on_schema_change: the contract: ``'ignore_extra'`` leaves file columns the table lacks out
        (as ``policy='ignore_extra'``); under ``'add_columns'`` the target given here already has them.
    :return: the check: ok, warn (warnings, or problems under ``schema_check='warn'``).
    :raises SchemaError: problems under ``schema_check='strict'`` or ``'ignore_extra'``.
    """
    typed, from_path = fmt.lower() in TYPED_FORMATS, path_columns(file)
    ignore_case = case_insensitive(settings or {})
    found = SchemaComparison()
    if structure_columns is None:
        found.extend(compare_by_name(
            file_columns or [], target, typed=typed, ignore_extra="ignore_extra" in (policy, on_schema_change),
            ignore_case=ignore_case,
            from_path=from_path,
        ))  # fmt: skip
    else:
        found.extend(compare_by_position(structure_columns, target))
        if file_columns is not None:
            found.extend(structure_in_file(
                structure_columns, file_columns, typed=typed, ignore_case=ignore_case, from_path=from_path
            ))  # fmt: skip
    notes = f" ({_listing(found.notes, '; ')})" if found.notes else ""
    if found.errors and policy != "warn":
        raise SchemaError(
            f"{file} does not match table {table}: {_listing(found.errors, '; ')}. To load it anyway, as the server "
            f"would, pass schema_check='warn'{notes}"
        )
    problems = found.errors + found.warnings
    if problems:
        loading = " (loading anyway: schema_check='warn')" if found.errors else ""
        return Check(
            name=CHECK_NAME,
            status="warn",
            message=f"{file} against table {table}{loading}: {_listing(problems, '; ')}{notes}",
        )
    source = "structure" if structure_columns is not None else file
    untyped = "" if typed else (
        f"; names compared, not types: {fmt} files carry no types, each value is parsed as its column's type "
        "during the insert"
    )
    return Check(name=CHECK_NAME, status="ok", message=f"{source} matches table {table}{notes}{untyped}")


def add_check(plan: LoadPlan, check: Check) -> None:
    """Add a check to the plan; a warning also joins the plan's warnings."""
    plan.checks.append(check)
    if check.status == "warn":
        plan.warnings.append(check.message)
