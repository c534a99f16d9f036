"""Byte sizes: units, parsing (pydantic's ByteSize) and the short form reason lines use."""

from __future__ import annotations

import re

from pydantic import ByteSize, TypeAdapter, ValidationError

from airflow_provider_s3ch.core.errors import InvalidRequestError

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

#: The largest size a ClickHouse memory setting takes (Int64).
MAX_SIZE = 2**63 - 1

_BYTE_SIZE = TypeAdapter(ByteSize)
#: Kubernetes' and ClickHouse's binary suffixes (``8Gi``, ``512Mi``), which ByteSize spells ``GiB``, ``MiB``.
_BINARY_SHORT = re.compile(r"([\d.\s]+[KMGTPE]i)", re.IGNORECASE)


def parse_size(value: int | float | str | None, name: str = "memory_cap") -> int | None:
    """Parse a byte size: an integer, or a string such as ``"8GiB"``, ``"512 MiB"``, ``"2GB"``.

    Binary units are powers of 1024: ``Ki``/``KiB``, ``Mi``/``MiB``, ``Gi``/``GiB``, ``Ti``/``TiB`` (the
    Kubernetes and ClickHouse spelling, and pydantic's :class:`~pydantic.ByteSize` one); decimal units are
    powers of 1000: ``K``/``KB``, ``M``/``MB``, ``G``/``GB``, ``T``/``TB``. Any case.

    :param value: bytes as a number, or a number followed by a unit.
    :param name: the argument's name, for the error message.
    :return: the size in bytes, or None when ``value`` is None or empty.
    :raises InvalidRequestError: not a size, or not positive.
    """
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        raise InvalidRequestError(f"{name}={value!r} is not a size; give bytes or a string like '8GiB'")
    try:
        text = value.strip() if isinstance(value, str) else value
        if isinstance(text, str) and _BINARY_SHORT.fullmatch(text):
            text += "B"
        size = int(_BYTE_SIZE.validate_python(text))
    except (ValidationError, ValueError, OverflowError):
        raise InvalidRequestError(
            f"{name}={value!r} is not a size; give bytes (e.g. 8589934592) or a number with a unit "
            "such as '8Gi' or '8GiB' (powers of 1024), '512Mi', or '2G' / '2GB' (powers of 1000)"
        ) from None
    if size <= 0:
        raise InvalidRequestError(f"{name}={value!r} must be positive; give bytes or a string like '8GiB'")
    if size > MAX_SIZE:
        raise InvalidRequestError(
            f"{name}={value!r} is {size} bytes, above {MAX_SIZE} (8 EiB), the most ClickHouse's memory settings "
            "take; give the memory the load may use, e.g. '8GiB'"
        )
    return size


def fmt_bytes(n: float) -> str:
    """Format a byte count for a reason line: ``"2.67 GiB"``, ``"256 MiB"``.

    :param n: bytes.
    :return: a short human-readable size (binary units).
    """
    for unit, size in (("TiB", 1024**4), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(n) >= size:
            value = n / size
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.2f} {unit}"
    return f"{int(n)} B"



def is_byte_setting(name: str) -> bool:
    """Whether a ClickHouse setting's value is a number of bytes (for a readable size beside it in the log)."""
    return name.endswith("_bytes") or name in ("max_memory_usage", "max_download_buffer_size", "reserve_memory")
