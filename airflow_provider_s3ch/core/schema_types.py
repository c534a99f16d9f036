"""Which column types the schema check compares, and what it says of a value of one type going into a column of
another (:mod:`airflow_provider_s3ch.core.schema`'s "Types"). Pure."""

from __future__ import annotations

import re

_WRAPPER_RE = re.compile(r"^(?:Nullable|LowCardinality)\((.*)\)$", re.S)
_NESTED = frozenset({"Array", "Map", "Tuple", "Nested"})
_ANY = frozenset({"JSON", "Object", "Dynamic", "Variant"})


def base_type(type_name: str) -> str:
    """The type under ``Nullable(…)`` and ``LowCardinality(…)``."""
    text = type_name.strip()
    while m := _WRAPPER_RE.match(text):
        text = m.group(1).strip()
    return text


def type_family(type_name: str) -> str:
    """``nested`` (Array, Map, Tuple, Nested), ``any`` (JSON, Dynamic, Variant), ``text``, ``integer``,
    ``float``, ``decimal`` or ``other`` (dates, enums, UUID, ...)."""
    head = base_type(type_name).split("(", 1)[0].strip()
    if head in _NESTED:
        return "nested"
    if head in _ANY:
        return "any"
    if head in {"String", "FixedString"}:
        return "text"
    if re.fullmatch(r"U?Int\d+", head):
        return "integer"
    if re.fullmatch(r"B?Float\d+", head):
        return "float"
    return "decimal" if re.fullmatch(r"Decimal\d*", head) else "other"


def type_problem(source: str, target: str) -> tuple[str, str] | None:
    """``("error" | "warning", why)`` when a value of type ``source`` goes into a ``target`` column; None when fine.

    :param source: the file's (or the structure's) type.
    :param target: the table column's type.
    """
    src, dst = type_family(source), type_family(target)
    if "any" in (src, dst):
        return None
    if (src == "nested") != (dst == "nested"):
        return "error", f"{source} into {target}: the server cannot read a nested type as a plain one or back"
    if src == "text" and dst in {"integer", "float", "decimal"} and "Nullable(" in target:
        return "error", (
            f"{source} into {target}: the server reads text that is not a number as NULL there, without an "
            "error; give the files a numeric column, or the table a String one"
        )
    if src == "text" and dst in {"integer", "float", "decimal"}:
        return "warning", (
            f"{source} into {target}: each value is parsed as a number; text that is not one fails the load"
        )
    if src == "float" and dst == "integer":
        return "warning", f"{source} into {target}: the fraction is dropped (1.5 loads as 1)"
    return None
