"""The job schema: every key a job accepts, declared once.

A :class:`Key` says what one key must be (its check), its default, its bounds and one line of
documentation.  Validation, defaults, ``--set`` parsing, every sync model's options and the
generated job reference (``docs/job-reference.md``) all read these declarations, so a key is
never described in two places.

The module has two parts:

* check builders (:func:`is_int`, :func:`is_num`, :func:`one_of`, :func:`optional`, ...) and
  key builders (:func:`integer`, :func:`number`, :func:`choice`, :func:`boolean`,
  :func:`text`, :func:`mapping`) that write the "expected" text from the bounds, so a bound is
  stated once and the message always agrees with the check;
* the validation engine, :func:`check_section`, which raises :class:`SchemaError` (the job
  layer turns it into a ``JobError`` naming the job file).

The job reference is rendered from the declarations by :mod:`flegel.job.reference`.

This module sits at the bottom of flegel's layers: it imports nothing from flegel.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MISSING",
    "describe",
    "REQUIRED",
    "Check",
    "Key",
    "SchemaError",
    "any_of",
    "anything",
    "boolean",
    "check_section",
    "choice",
    "defaults",
    "describe_default",
    "integer",
    "is_bool",
    "is_int",
    "is_list",
    "is_mapping",
    "is_num",
    "is_plain_name",
    "is_str",
    "mapping",
    "number",
    "one_of",
    "optional",
    "text",
]

Check = Callable[[Any], bool]


class _Required:
    """Marker of a key without a default (it must be given)."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()


class _Missing:
    """Marker of "no value was found" in a :class:`SchemaError`."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


@dataclass(frozen=True)
class Key:
    """One job key.

    Attributes
    ----------
    expected : str
        What the value must be, as shown in messages ("a positive integer").
    check : callable
        Returns True when a value is acceptable.
    default : Any
        The value used when the key is absent; :data:`REQUIRED` when it must be given.
    doc : str
        One line for the job reference.
    """

    expected: str
    check: Callable[[Any], bool]
    default: Any = REQUIRED
    doc: str = ""

    @property
    def required(self) -> bool:
        """Whether the key has no default and must be given."""
        return self.default is REQUIRED


class SchemaError(ValueError):
    """A value that does not fit its :class:`Key`; the config layer adds the file name.

    Parameters
    ----------
    key : str
        Key path, e.g. ``"sync.batch"`` or ``"stragglers[0].workers"``.
    expected : str
        What the value must be.
    found : Any
        The value found; :data:`MISSING` when the key is absent.
    detail : str or None
        A complete message replacing "expected ..., found ...", e.g. for unknown keys.
    """

    def __init__(self, key: str, expected: str, found: Any = MISSING,
                 detail: str | None = None) -> None:
        self.key, self.expected, self.found, self.detail = key, expected, found, detail
        super().__init__(describe(key, expected, found, detail))


def describe(key: str, expected: str, found: Any = MISSING, detail: str | None = None) -> str:
    """The one wording of a problem with a key: "KEY: expected X, found Y" (or the detail).

    A detail that names the key path itself is kept as it is.
    """
    if detail is not None:
        return detail if detail.startswith(key) else f"{key}: {detail}"
    if found is MISSING:
        return f"{key}: expected {expected}, but the key is missing"
    return f"{key}: expected {expected}, found {found!r}"


# --------------------------------------------------------------------------- checks
def _is_real_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_real_num(v: Any) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)
            and not (isinstance(v, float) and math.isnan(v)))


def _in_bounds(v: float, lo: float | None, hi: float | None, lo_open: bool,
               hi_open: bool) -> bool:
    if lo is not None and (v <= lo if lo_open else v < lo):
        return False
    return hi is None or (v < hi if hi_open else v <= hi)


def is_int(lo: int | None = None, hi: int | None = None) -> Check:
    """Check: an integer (not a bool) within ``[lo, hi]``.

    Parameters
    ----------
    lo, hi : int or None
        Inclusive bounds; None for no bound.

    Returns
    -------
    callable
        The check.
    """
    def ok(v: Any) -> bool:
        return _is_real_int(v) and _in_bounds(v, lo, hi, False, False)
    return ok


def is_num(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False,
           hi_open: bool = False) -> Check:
    """Check: an int or float (not a bool, not NaN) within the bounds.

    Parameters
    ----------
    lo, hi : float or None
        Bounds; None for no bound.
    lo_open, hi_open : bool
        Whether the bound itself is excluded.

    Returns
    -------
    callable
        The check.
    """
    def ok(v: Any) -> bool:
        return _is_real_num(v) and _in_bounds(v, lo, hi, lo_open, hi_open)
    return ok


def one_of(*choices: Any) -> Check:
    """Check: one of ``choices`` (compared with ``==``, bools never equal to 0 or 1).

    Parameters
    ----------
    *choices : Any
        The accepted values.

    Returns
    -------
    callable
        The check.
    """
    def ok(v: Any) -> bool:
        return any(v == c and isinstance(v, bool) == isinstance(c, bool) for c in choices)
    return ok


def optional(check: Check) -> Check:
    """Check: None, or what ``check`` accepts.

    Parameters
    ----------
    check : callable
        The check for a value that is not None.

    Returns
    -------
    callable
        The check.
    """
    def ok(v: Any) -> bool:
        return v is None or check(v)
    return ok


def any_of(*checks: Check) -> Check:
    """Check: accepted by at least one of ``checks``.

    Parameters
    ----------
    *checks : callable
        The alternatives.

    Returns
    -------
    callable
        The check.
    """
    def ok(v: Any) -> bool:
        return any(c(v) for c in checks)
    return ok


def anything(v: Any) -> bool:
    """Check that accepts every value (for keys checked elsewhere).

    Parameters
    ----------
    v : Any
        The value.

    Returns
    -------
    bool
        Always True.
    """
    return True


def is_str(v: Any) -> bool:
    """Check: a non-empty string.

    Parameters
    ----------
    v : Any
        The value.

    Returns
    -------
    bool
        Whether ``v`` is a non-empty string.
    """
    return isinstance(v, str) and bool(v)


def is_plain_name(v: Any) -> bool:
    """Check: a non-empty string usable as one path component, never a way out of a folder.

    Parameters
    ----------
    v : Any
        The value.

    Returns
    -------
    bool
        Whether ``v`` is a non-empty string without ``/``, ``\\``, NUL or ``..`` (a run's
        directory is named after it, and must stay inside ``output.dir``).
    """
    return is_str(v) and not any(bad in v for bad in ("/", "\\", "\0", ".."))


def is_bool(v: Any) -> bool:
    """Check: ``true`` or ``false``.

    Parameters
    ----------
    v : Any
        The value.

    Returns
    -------
    bool
        Whether ``v`` is a bool.
    """
    return isinstance(v, bool)


def is_mapping(v: Any) -> bool:
    """Check: a mapping.

    Parameters
    ----------
    v : Any
        The value.

    Returns
    -------
    bool
        Whether ``v`` is a dict.
    """
    return isinstance(v, dict)


def is_list(v: Any) -> bool:
    """Check: a list.

    Parameters
    ----------
    v : Any
        The value.

    Returns
    -------
    bool
        Whether ``v`` is a list.
    """
    return isinstance(v, list)


# --------------------------------------------------------------------------- key builders
def _fmt(v: float) -> str:
    return str(int(v)) if float(v).is_integer() and abs(v) < 1e15 else repr(v)


def _bounds_text(kind: str, lo: float | None, hi: float | None, lo_open: bool,
                 hi_open: bool) -> str:
    """'a positive integer', 'a number between 0 and 1 (exclusive)', 'an integer >= 3'..."""
    art = "an" if kind[0] in "aeiou" else "a"
    if hi is None:
        if lo is None:
            return f"{art} {kind}"
        if lo == 0:
            return f"a positive {kind}" if lo_open else f"a non-negative {kind}"
        if lo == 1 and not lo_open and kind == "integer":
            return "a positive integer"
        return f"{art} {kind} {'>' if lo_open else '>='} {_fmt(lo)}"
    if lo is None:
        return f"{art} {kind} {'<' if hi_open else '<='} {_fmt(hi)}"
    if lo_open == hi_open:
        which = "exclusive" if lo_open else "inclusive"
        return f"{art} {kind} between {_fmt(lo)} and {_fmt(hi)} ({which})"
    return (f"{art} {kind} {'>' if lo_open else '>='} {_fmt(lo)} and "
            f"{'<' if hi_open else '<='} {_fmt(hi)}")


def _finish(expected: str, unit: str, null: bool) -> str:
    if unit:
        expected += f" of {unit}"
    return expected + (" or null" if null else "")


def integer(doc: str, default: Any = REQUIRED, *, lo: int | None = None, hi: int | None = None,
            null: bool = False, unit: str = "", expected: str | None = None) -> Key:
    """A key holding an integer within ``[lo, hi]``.

    Parameters
    ----------
    doc : str
        One line for the job reference.
    default : Any
        The default; :data:`REQUIRED` when the key must be given.
    lo, hi : int or None
        Inclusive bounds.
    null : bool
        Whether null is accepted too.
    unit : str
        Unit for the message ("points" gives "a positive integer of points").
    expected : str or None
        Replaces the generated "expected" text.

    Returns
    -------
    Key
        The declaration.
    """
    check = is_int(lo, hi)
    text_ = expected or _finish(_bounds_text("integer", lo, hi, False, False), unit, null)
    return Key(text_, optional(check) if null else check, default, doc)


def number(doc: str, default: Any = REQUIRED, *, lo: float | None = None,
           hi: float | None = None, lo_open: bool = False, hi_open: bool = False,
           null: bool = False, unit: str = "", expected: str | None = None) -> Key:
    """A key holding a number (int or float) within bounds.

    Parameters
    ----------
    doc : str
        One line for the job reference.
    default : Any
        The default; :data:`REQUIRED` when the key must be given.
    lo, hi : float or None
        Bounds.
    lo_open, hi_open : bool
        Whether a bound itself is excluded (``lo=0, lo_open=True``: "a positive number").
    null : bool
        Whether null is accepted too.
    unit : str
        Unit for the message ("milliseconds").
    expected : str or None
        Replaces the generated "expected" text.

    Returns
    -------
    Key
        The declaration.
    """
    check = is_num(lo, hi, lo_open=lo_open, hi_open=hi_open)
    text_ = expected or _finish(_bounds_text("number", lo, hi, lo_open, hi_open), unit, null)
    return Key(text_, optional(check) if null else check, default, doc)


def _choice_text(choices: Sequence[Any]) -> str:
    shown = [f"'{c}'" if isinstance(c, str) else describe_default(c) for c in choices]
    if len(shown) == 1:
        return shown[0]
    return ", ".join(shown[:-1]) + " or " + shown[-1]


def choice(doc: str, choices: Iterable[Any], default: Any = REQUIRED, *, null: bool = False,
           expected: str | None = None) -> Key:
    """A key holding one of a few values.

    Parameters
    ----------
    doc : str
        One line for the job reference.
    choices : iterable
        The accepted values.
    default : Any
        The default; :data:`REQUIRED` when the key must be given.
    null : bool
        Whether null is accepted too.
    expected : str or None
        Replaces the generated "expected" text ("'a', 'b' or 'c'").

    Returns
    -------
    Key
        The declaration.
    """
    options = tuple(choices)
    check = one_of(*options)
    text_ = expected or (_choice_text(options) + (" or null" if null else ""))
    return Key(text_, optional(check) if null else check, default, doc)


def boolean(doc: str, default: Any = REQUIRED) -> Key:
    """A key holding ``true`` or ``false``.

    Parameters
    ----------
    doc : str
        One line for the job reference.
    default : Any
        The default; :data:`REQUIRED` when the key must be given.

    Returns
    -------
    Key
        The declaration.
    """
    return Key("true or false", is_bool, default, doc)


def text(doc: str, default: Any = REQUIRED, *, null: bool = False,
         expected: str = "a string") -> Key:
    """A key holding a non-empty string.

    Parameters
    ----------
    doc : str
        One line for the job reference.
    default : Any
        The default; :data:`REQUIRED` when the key must be given.
    null : bool
        Whether null is accepted too.
    expected : str
        What the string is, for messages ("a folder path").

    Returns
    -------
    Key
        The declaration.
    """
    return Key(expected + (" or null" if null else ""), optional(is_str) if null else is_str,
               default, doc)


def mapping(doc: str, default: Any = REQUIRED, *, null: bool = False,
            expected: str = "a mapping") -> Key:
    """A key holding a mapping (a section of its own, or free-form parameters).

    Parameters
    ----------
    doc : str
        One line for the job reference.
    default : Any
        The default; :data:`REQUIRED` when the key must be given.
    null : bool
        Whether null is accepted too.
    expected : str
        What the mapping is, for messages.

    Returns
    -------
    Key
        The declaration.
    """
    return Key(expected + (" or null" if null else ""),
               optional(is_mapping) if null else is_mapping, default, doc)


# --------------------------------------------------------------------------- validation
def _join(prefix: str, key: Any) -> str:
    return f"{prefix}.{key}" if prefix else str(key)


def check_section(prefix: str, given: Any, schema: Mapping[str, Key], *,
                  what: str = "a mapping") -> dict[str, Any]:
    """Check one section of a job against its keys; return it completed with defaults.

    Parameters
    ----------
    prefix : str
        Key path of the section ("" for the top level, ``"stop"``, ``"stragglers[0]"``).
    given : Any
        The section as written; None stands for an empty section.
    schema : mapping of str to Key
        The keys the section accepts, in the order they are checked.
    what : str
        What the section must be, for the message when it is not a mapping.

    Returns
    -------
    dict
        Every key of ``schema``: the given value, or the default.  The order is the schema's.

    Raises
    ------
    SchemaError
        For the first unknown key (with a did-you-mean hint), missing required key or value
        its check refuses, in that order.
    """
    given = {} if given is None else given
    if not isinstance(given, dict):
        raise SchemaError(prefix or "(top level)", what, given)
    for k in given:
        if k not in schema:
            close = difflib.get_close_matches(str(k), list(schema), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise SchemaError(_join(prefix, k), "", given[k], detail=(
                f"unknown key{hint}; expected one of: {', '.join(schema)}"))
    out: dict[str, Any] = {}
    for k, key in schema.items():
        if k not in given:
            if key.required:
                raise SchemaError(_join(prefix, k), key.expected)
            out[k] = key.default
        elif not key.check(given[k]):
            raise SchemaError(_join(prefix, k), key.expected, given[k])
        else:
            out[k] = given[k]
    return out


def defaults(schema: Mapping[str, Key]) -> dict[str, Any]:
    """The default of every key that has one.

    Parameters
    ----------
    schema : mapping of str to Key
        The keys.

    Returns
    -------
    dict
        Key name -> default, required keys left out.
    """
    return {k: key.default for k, key in schema.items() if not key.required}


# --------------------------------------------------------------------------- values
def describe_default(value: Any) -> str:
    """Write a default as it would appear in YAML.

    Parameters
    ----------
    value : Any
        The default, or :data:`REQUIRED`.

    Returns
    -------
    str
        ``required``, ``null``, ``true``, ``1.0``, ``auto``, ``[]``...
    """
    if value is REQUIRED:
        return "required"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(describe_default(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {describe_default(v)}" for k, v in value.items()) + "}"
    return str(value)
