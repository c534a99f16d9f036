"""The user's setting values against the types the server has for them (``system.settings``' ``type``). Pure.

A value the server cannot take fails on the server as an error about something else: ``max_threads='lots'``
as a parse error (code 27) that reads like the data's, ``max_insert_threads=-1`` as a conversion error
(code 70), each after the schema check's ``DESCRIBE`` failed on it too. :func:`check_settings` says it before
any statement carries the value, naming the setting, the value and the server's type.

The rules are what ClickHouse's setting fields parse from the text the native protocol sends (the value's
``str``), as the local engine answered them (``tests/integration/test_setting_types.py`` holds the check to
the server): a value the check refuses, the server refuses too. A type the check does not know is not judged.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import NamedTuple

from airflow_provider_s3ch.core.errors import InvalidRequestError
from airflow_provider_s3ch.core.models import SettingValue

#: Prefix of user-defined settings (ClickHouse's ``custom_settings_prefixes`` convention): not in
#: ``system.settings``, so not judged.
CUSTOM_PREFIX = "custom_"

_SUFFIX = r"(?:[kKMGT]i?)?"  # ClickHouse's size suffixes on whole numbers: 10k, 10K, 8G (1000s), 8Gi (1024s)
_UINT_RE = re.compile(rf"\+?(\d+){_SUFFIX}")
_INT_RE = re.compile(rf"[+-]?\d+{_SUFFIX}")
_PLAIN_UINT_RE = re.compile(r"\+?\d+")
_FLOAT_RE = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_AUTO_N_RE = re.compile(r"auto\(\d*\)")
_POWERS = {"k": 1, "K": 1, "M": 2, "G": 3, "T": 4}
_BOOL = frozenset({"0", "1", "true", "false"})
#: An enumeration's value: names (letters, digits, ``_``), several joined by commas for some (join_algorithm).
_ENUM_RE = re.compile(r"[A-Za-z0-9_.,/+\- ]*")

_UINT = "a whole number >= 0 (a size suffix such as 10G or 8Gi is taken)"
_INT = "a whole number (a size suffix such as 10G or 8Gi is taken)"
_FLOAT = "a number such as 0.5 or 1e3"
_BOOL_TEXT = "0, 1, true or false"
_SECONDS = "a number of seconds such as 30 or 1.5"

#: Types whose values are text the check cannot judge: any string goes.
_FREE_TEXT = frozenset({"String", "Timezone", "URI", "Map"})


def _uint(text: str) -> bool:
    return _UINT_RE.fullmatch(text) is not None


def _non_zero_uint(text: str) -> bool:
    m = _UINT_RE.fullmatch(text)
    return m is not None and int(m.group(1)) > 0


def _threads(text: str) -> bool:
    return _PLAIN_UINT_RE.fullmatch(text) is not None or text == "auto" or _AUTO_N_RE.fullmatch(text) is not None


class _Rule(NamedTuple):
    """What a type takes (for the message) and a predicate over the value's text."""

    what: str
    takes: Callable[[str], bool]


def _float(text: str) -> bool:
    return _FLOAT_RE.fullmatch(text) is not None


def _bool(text: str) -> bool:
    return text.lower() in _BOOL


#: The types known by name.
_RULES: dict[str, _Rule] = {
    "NonZeroUInt64": _Rule(f"{_UINT}, not 0", _non_zero_uint),
    "MaxThreads": _Rule("a whole number of threads >= 0, 'auto' (0 means it too: the server's cores) or 'auto(N)'",
                        _threads),
    "UInt64Auto": _Rule(f"{_UINT}, or 'auto'", lambda t: _uint(t) or t == "auto"),
    "Milliseconds": _Rule("a whole number of milliseconds >= 0", _uint),
    "Float": _Rule(_FLOAT, _float),
    "Double": _Rule(_FLOAT, _float),
    "FloatAuto": _Rule(f"{_FLOAT}, or 'auto'", lambda t: _float(t) or t == "auto"),
    "Seconds": _Rule(_SECONDS, _float),
    "Bool": _Rule(_BOOL_TEXT, _bool),
    "BoolAuto": _Rule(f"{_BOOL_TEXT}, or 'auto'", lambda t: _bool(t) or t == "auto"),
    "Char": _Rule("one character", lambda t: len(t) <= 1),
}

#: The integer types of every width (UInt8 ... UInt64, Int8 ... Int64).
_RULES_BY_PATTERN: tuple[tuple[re.Pattern[str], _Rule], ...] = (
    (re.compile(r"UInt\d+"), _Rule(_UINT, _uint)),
    (re.compile(r"Int\d+"), _Rule(_INT, lambda t: _INT_RE.fullmatch(t) is not None)),
)

#: Every other type is one of the server's enumerations (LoadBalancing, OverflowMode, JoinAlgorithm, ...): which
#: names it takes the server knows; a value that is no name at all is refused here.
_ENUM_TYPE_RE = re.compile(r"[A-Z][A-Za-z0-9]*")
_ENUM_RULE = _Rule("one of the names the server lists for it (letters, digits, '_', several joined by commas for "
                   "some)", lambda t: _ENUM_RE.fullmatch(t) is not None)


def _rule(type_name: str) -> _Rule | None:
    """What ``type_name`` takes (for the message) and a predicate over the value's text; None: not judged."""
    if type_name in _RULES:
        return _RULES[type_name]
    for pattern, rule in _RULES_BY_PATTERN:
        if pattern.fullmatch(type_name):
            return rule
    if type_name in _FREE_TEXT or not _ENUM_TYPE_RE.fullmatch(type_name):
        return None
    return _ENUM_RULE


def setting_text(value: SettingValue) -> str:
    """The text the native protocol sends for a value (what the server parses)."""
    return str(value)


def setting_problem(name: str, value: SettingValue, type_name: str) -> str | None:
    """Why the server would refuse ``value`` for setting ``name`` of type ``type_name``; None when it takes it,
    or when the check cannot judge the type.

    :param name: the setting's name.
    :param value: the user's value.
    :param type_name: its type in the server's ``system.settings`` (e.g. ``UInt64``, ``MaxThreads``).
    """
    rule = _rule(type_name)
    if rule is None:
        return None
    what, takes = rule
    if takes(setting_text(value)):
        return None
    sent = f" (sent as {setting_text(value)!r})" if isinstance(value, float) else ""
    return f"{name}={value!r}{sent} is not a value of its type on the server, {type_name}: it takes {what}"


def check_settings(settings: Mapping[str, SettingValue], types: Mapping[str, str] | None, *, server: str = ""
                   ) -> None:
    """Refuse, before any statement carries them, the settings the server would refuse: a name it does not have,
    a value its type does not take.

    :param settings: the user's settings.
    :param types: the server's type of each setting it has among their names (``system.settings``); None when
        it could not be read: nothing is judged.
    :param server: the server as the message names it (e.g. ``ClickHouse 26.9 at host:9000``).
    :raises InvalidRequestError: naming each setting, its value and the type, or the unknown name.
    """
    if types is None:
        return
    on = f" {server}" if server else ""
    problems = []
    for name, value in settings.items():
        if name in types:
            problem = setting_problem(name, value, types[name])
            if problem:
                problems.append(problem)
        elif not name.startswith(CUSTOM_PREFIX):
            problems.append(f"{name!r} is not a setting of the server (its system.settings has no such name): the "
                            "server would refuse the load; check the spelling or remove it")
    if problems:
        raise InvalidRequestError(
            f"settings: {'; '.join(problems)}; fix the operator's settings{f' (server{on})' if on else ''}"
        )


def setting_int(value: SettingValue | None, default: int) -> int:
    """A whole-number setting's value as the server reads it (``'10G'``, ``'8Gi'``, ``'auto(4)'``, ``'+5'``);
    ``default`` when there is none, or it is ``auto`` or no whole number.

    :param value: the value (the user's or the plan's).
    :param default: what to take otherwise.
    """
    if value is None or isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    text = str(value)
    auto = _AUTO_N_RE.fullmatch(text)
    if auto:
        digits = text[5:-1]
        return int(digits) if digits else default
    m = re.fullmatch(r"\+?(\d+)([kKMGT]?)(i?)", text)
    if m is None:
        return default
    number, unit, binary = m.groups()
    return int(number) * (1024 if binary else 1000) ** _POWERS.get(unit, 0)
