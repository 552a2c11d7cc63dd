"""One validation vocabulary: constraints that know their check and their message.

A *constraint* (in the manner of scikit-learn's ``_param_validation``: ``Interval``,
``StrOptions``, ...) says what a value must be: :meth:`Constraint.is_satisfied_by` checks a
value and :meth:`Constraint.describe` words the rule, so a bound is stated once and the
message always agrees with the check.  One vocabulary serves every place flegel checks a value:

* the job schema: a :class:`Key` is a constraint with a default and one line of documentation;
  validation, defaults, ``--set`` parsing, every sync model's options and the generated job
  reference (``docs/job-reference.md``) all read these declarations;
* the ``data:`` keys (:mod:`flegel.data.keys`);
* the algorithms' constructor parameters (an algorithm's ``PARAMS``, checked by
  :func:`check_params`, which raises a :class:`ParameterError` naming the parameter);
* the scikit-learn estimators, whose ``_parameter_constraints`` are derived from the
  algorithms' ``PARAMS`` (:mod:`flegel.estimators.base`).

A constraint words itself for a job file (YAML: ``'a' or 'b'``, ``true or false``, ``null``,
"a positive integer") or, with ``describe(python=True)``, for a Python caller (``one of 'a',
'b'``, ``True or False``, ``None``, "an integer >= 1"), the words of scikit-learn-style
parameter checks.

The module has three parts: the constraints; :class:`Key` and the key builders
(:func:`integer`, :func:`number`, :func:`choice`, :func:`boolean`, :func:`text`,
:func:`mapping`); the validation engine, :func:`check_section` and :func:`check_params`, which
raise :class:`SchemaError` / :class:`ParameterError` carrying the key (the job layer turns
a SchemaError into a ``JobError`` naming the job file).  The job reference is rendered from
these declarations by :mod:`flegel.job.reference`.  The check-style names (:func:`is_int`,
:func:`one_of`, :func:`optional`, ...) are the constraints under the names job declarations
use as checks.

This module sits at the bottom of flegel's layers: it imports nothing from flegel.
"""

from __future__ import annotations

import difflib
import math
import numbers
import os
from collections import abc
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MISSING",
    "REQUIRED",
    "AnyOf",
    "Anything",
    "Boolean",
    "Check",
    "Constraint",
    "Described",
    "Dict",
    "Integer",
    "Items",
    "Key",
    "List",
    "Nullable",
    "Options",
    "ParameterError",
    "PathName",
    "PlainName",
    "Real",
    "SchemaError",
    "Text",
    "YamlWord",
    "any_of",
    "anything",
    "boolean",
    "check_params",
    "check_section",
    "choice",
    "defaults",
    "describe",
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
    "settle",
    "text",
]

#: A plain predicate (every :class:`Constraint` is one too).
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


# --------------------------------------------------------------------------- constraints
class Constraint:
    """What a value must be: its check and its wording, declared together.

    A constraint is also a predicate (calling it checks a value), so it serves wherever a
    plain check did.
    """

    def is_satisfied_by(self, value: Any) -> bool:
        """Whether ``value`` follows the rule."""
        raise NotImplementedError

    def describe(self, python: bool = False) -> str:
        """The rule in words, as messages show it after "expected" or "must be".

        Parameters
        ----------
        python : bool
            Word it for a Python caller (``None``, ``True``, ``one of 'a', 'b'``, bounds as
            comparisons) instead of for a job file (``null``, ``true``, ``'a' or 'b'``,
            "positive", "non-negative").
        """
        raise NotImplementedError

    def convert(self, value: Any) -> Any:
        """An accepted value in the form code uses (an int for an integer, ...)."""
        return value

    def __call__(self, value: Any) -> bool:
        return self.is_satisfied_by(value)

    def __str__(self) -> str:
        return self.describe()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.describe()!r})"


def _fmt(v: float, python: bool) -> str:
    """A bound as words show it: as declared for Python (``0.0``), YAML-like otherwise."""
    if python:
        return str(v)
    return str(int(v)) if float(v).is_integer() and abs(v) < 1e15 else repr(v)


def _comparisons(lo: float | None, hi: float | None, lo_open: bool, hi_open: bool,
                 python: bool) -> str:
    parts = []
    if lo is not None:
        parts.append(f"{'>' if lo_open else '>='} {_fmt(lo, python)}")
    if hi is not None:
        parts.append(f"{'<' if hi_open else '<='} {_fmt(hi, python)}")
    return " and ".join(parts)


def _bounds_text(kind: str, lo: float | None, hi: float | None, lo_open: bool,
                 hi_open: bool, python: bool) -> str:
    """'a positive integer', 'a number between 0 and 1 (exclusive)', 'an integer >= 3'...;
    for Python every bound as a comparison ('an integer >= 1')."""
    art = "an" if kind[0] in "aeiou" else "a"
    if python or (lo is None and hi is None):
        bounds = _comparisons(lo, hi, lo_open, hi_open, python)
        return f"{art} {kind}" + (f" {bounds}" if bounds else "")
    if hi is None:
        assert lo is not None
        if lo == 0:
            return f"a positive {kind}" if lo_open else f"a non-negative {kind}"
        if lo == 1 and not lo_open and kind == "integer":
            return "a positive integer"
        return f"{art} {kind} {'>' if lo_open else '>='} {_fmt(lo, False)}"
    if lo is None:
        return f"{art} {kind} {'<' if hi_open else '<='} {_fmt(hi, False)}"
    if lo_open == hi_open:
        which = "exclusive" if lo_open else "inclusive"
        return f"{art} {kind} between {_fmt(lo, False)} and {_fmt(hi, False)} ({which})"
    return f"{art} {kind} {_comparisons(lo, hi, lo_open, hi_open, False)}"


def _in_bounds(v: float, lo: float | None, hi: float | None, lo_open: bool,
               hi_open: bool) -> bool:
    if lo is not None and (v <= lo if lo_open else v < lo):
        return False
    return hi is None or (v < hi if hi_open else v <= hi)


def _is_bool(v: Any) -> bool:
    # NumPy's bool is no int subclass, but it is no count either
    return isinstance(v, bool) or (type(v).__module__ == "numpy"
                                   and type(v).__name__ in ("bool", "bool_"))


class Integer(Constraint):
    """An integer (Python or NumPy, never a bool) within ``[lo, hi]``.

    Parameters
    ----------
    lo, hi : int or None
        Inclusive bounds; None for no bound.
    unit : str
        What is counted, for the words ("points" gives "a positive integer of points").
    """

    def __init__(self, lo: int | None = None, hi: int | None = None, *, unit: str = "") -> None:
        self.lo, self.hi, self.unit = lo, hi, unit

    def is_satisfied_by(self, value: Any) -> bool:
        return (isinstance(value, numbers.Integral) and not _is_bool(value)
                and _in_bounds(int(value), self.lo, self.hi, False, False))

    def describe(self, python: bool = False) -> str:
        words = _bounds_text("integer", self.lo, self.hi, False, False, python)
        return words + (f" of {self.unit}" if self.unit else "")

    def convert(self, value: Any) -> int:
        return int(value)


class Real(Constraint):
    """A number (int or float, Python or NumPy; never a bool, never NaN) within bounds.

    Parameters
    ----------
    lo, hi : float or None
        Bounds; None for no bound.
    lo_open, hi_open : bool
        Whether a bound itself is excluded (``lo=0, lo_open=True``: "a positive number").
    unit : str
        Unit for the words ("milliseconds").
    finite : bool
        Whether infinities are refused too ("a finite number").
    """

    def __init__(self, lo: float | None = None, hi: float | None = None, *,
                 lo_open: bool = False, hi_open: bool = False, unit: str = "",
                 finite: bool = False) -> None:
        self.lo, self.hi, self.lo_open, self.hi_open = lo, hi, lo_open, hi_open
        self.unit, self.finite = unit, finite

    def is_satisfied_by(self, value: Any) -> bool:
        if not isinstance(value, numbers.Real) or _is_bool(value):
            return False
        v = float(value)
        if math.isnan(v) or (self.finite and math.isinf(v)):
            return False
        return _in_bounds(v, self.lo, self.hi, self.lo_open, self.hi_open)

    def describe(self, python: bool = False) -> str:
        kind = "finite number" if self.finite else "number"
        words = _bounds_text(kind, self.lo, self.hi, self.lo_open, self.hi_open, python)
        return words + (f" of {self.unit}" if self.unit else "")

    def convert(self, value: Any) -> float:
        return float(value)


class Options(Constraint):
    """One of a few values (compared with ``==``; a bool never equals 0 or 1).

    Parameters
    ----------
    values : iterable
        The accepted values, in the order the words list them.
    also : iterable
        Accepted too but not listed (aliases).
    """

    def __init__(self, values: Iterable[Any], *, also: Iterable[Any] = ()) -> None:
        self.values, self.also = tuple(values), tuple(also)

    def is_satisfied_by(self, value: Any) -> bool:
        return any(_same(value, c) for c in (*self.values, *self.also))

    def describe(self, python: bool = False) -> str:
        if python:
            return "one of " + ", ".join(map(repr, self.values))
        return _alternatives(self.words())

    def words(self) -> list[str]:
        """Each value as a job file writes it: ``'a'``, ``null``, ``true``, ``2``."""
        return [f"'{c}'" if isinstance(c, str) else describe_default(c) for c in self.values]


def _alternatives(words: list[str]) -> str:
    """'x', 'x or y', 'x, y or z'."""
    return ", ".join(words[:-1]) + " or " + words[-1] if len(words) > 1 else words[0]


def _same(value: Any, option: Any) -> bool:
    if _is_bool(value) != isinstance(option, bool) or \
            isinstance(value, str) != isinstance(option, str):
        return False
    try:
        return bool(value == option)
    except (TypeError, ValueError):  # an array compared with a number
        return False


class Boolean(Constraint):
    """``true`` or ``false`` (Python's or NumPy's bool)."""

    def is_satisfied_by(self, value: Any) -> bool:
        return _is_bool(value)

    def convert(self, value: Any) -> bool:
        return bool(value)

    def describe(self, python: bool = False) -> str:
        return "True or False" if python else "true or false"


class Text(Constraint):
    """A non-empty string.

    Parameters
    ----------
    what : str
        What the string is, for the words ("a folder path").
    """

    def __init__(self, what: str = "a string") -> None:
        self.what = what

    def is_satisfied_by(self, value: Any) -> bool:
        return isinstance(value, str) and bool(value)

    def describe(self, python: bool = False) -> str:
        return self.what


class PlainName(Text):
    """A non-empty string usable as one path component, never a way out of a folder: no
    ``/``, ``\\``, NUL or ``..`` (a run's directory is named after it, and must stay inside
    ``output.dir``)."""

    def __init__(self, what: str = "a name without '/', '\\' or '..'") -> None:
        super().__init__(what)

    def is_satisfied_by(self, value: Any) -> bool:
        return super().is_satisfied_by(value) and not any(
            bad in value for bad in ("/", "\\", "\0", ".."))


class PathName(Text):
    """A path: a string or ``os.PathLike`` that is not blank."""

    def __init__(self, what: str = "a file path") -> None:
        super().__init__(what)

    def is_satisfied_by(self, value: Any) -> bool:
        return isinstance(value, (str, os.PathLike)) and bool(str(value).strip())


class _OfType(Constraint):
    """A value of one Python type, worded by what it is for."""

    kind: type = object

    def __init__(self, what: str) -> None:
        self.what = what

    def is_satisfied_by(self, value: Any) -> bool:
        return isinstance(value, self.kind)

    def describe(self, python: bool = False) -> str:
        return self.what


class Dict(_OfType):
    """A mapping (a section of its own, or free-form parameters)."""

    kind = dict

    def __init__(self, what: str = "a mapping") -> None:
        super().__init__(what)


class List(_OfType):
    """A list."""

    kind = list

    def __init__(self, what: str = "a list") -> None:
        super().__init__(what)


class Items(Constraint):
    """A tuple or list whose every item follows ``item``.

    Parameters
    ----------
    item : Constraint
        The rule of each item.
    sizes : tuple of int or None
        The lengths accepted; None: any length of at least one.
    """

    def __init__(self, item: Constraint, sizes: tuple[int, ...] | None = None) -> None:
        self.item, self.sizes = item, sizes

    def is_satisfied_by(self, value: Any) -> bool:
        if not isinstance(value, (tuple, list)):
            return False
        if len(value) not in self.sizes if self.sizes is not None else not value:
            return False
        return all(self.item.is_satisfied_by(v) for v in value)

    def describe(self, python: bool = False) -> str:
        n = "a non-empty" if self.sizes is None else "/".join(map(str, self.sizes)) + "-item"
        return f"{n} list of: {self.item.describe(python)}"

    def convert(self, value: Any) -> tuple[Any, ...]:
        return tuple(self.item.convert(v) for v in value)


class Nullable(Constraint):
    """None (``null``), or what ``inner`` accepts."""

    def __init__(self, inner: Constraint) -> None:
        self.inner = inner

    def is_satisfied_by(self, value: Any) -> bool:
        return value is None or self.inner.is_satisfied_by(value)

    def describe(self, python: bool = False) -> str:
        return self.inner.describe(python) + (" or None" if python else " or null")

    def convert(self, value: Any) -> Any:
        return None if value is None else self.inner.convert(value)


class AnyOf(Constraint):
    """Accepted by at least one of ``constraints``."""

    def __init__(self, *constraints: Constraint) -> None:
        self.constraints = constraints

    def is_satisfied_by(self, value: Any) -> bool:
        return any(c.is_satisfied_by(value) for c in self.constraints)

    def describe(self, python: bool = False) -> str:
        words: list[str] = []
        for c in self.constraints:  # options join the list: "one character, 'a' or 'b'"
            words += c.words() if isinstance(c, Options) and not python else [c.describe(python)]
        return _alternatives(words)

    def convert(self, value: Any) -> Any:
        for c in self.constraints:
            if c.is_satisfied_by(value):
                return c.convert(value)
        return value


class Anything(Constraint):
    """Every value (for keys checked elsewhere)."""

    def is_satisfied_by(self, value: Any) -> bool:
        return True

    def describe(self, python: bool = False) -> str:
        return "anything"


class Described(Constraint):
    """A rule in words of its own: ``rule``'s check (a constraint or a plain predicate, e.g.
    one that needs NumPy) with ``text`` as its words, for a rule the generated words cannot
    say ("a built-in name ... or 'package.module:Class'")."""

    def __init__(self, rule: Constraint | Check, text: str) -> None:
        self.rule, self.text = rule, text

    def is_satisfied_by(self, value: Any) -> bool:
        return bool(self.rule(value))

    def describe(self, python: bool = False) -> str:
        return self.text

    def convert(self, value: Any) -> Any:
        return self.rule.convert(value) if isinstance(self.rule, Constraint) else value


def _as_constraint(check: Constraint | Check) -> Constraint:
    return check if isinstance(check, Constraint) else Described(check, "a valid value")


# ----------------------------------------------------------- the constraints as checks
def is_int(lo: int | None = None, hi: int | None = None) -> Integer:
    """Check: an integer (not a bool) within ``[lo, hi]`` (:class:`Integer`)."""
    return Integer(lo, hi)


def is_num(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False,
           hi_open: bool = False) -> Real:
    """Check: an int or float (not a bool, not NaN) within the bounds (:class:`Real`)."""
    return Real(lo, hi, lo_open=lo_open, hi_open=hi_open)


def one_of(*choices: Any) -> Options:
    """Check: one of ``choices`` (:class:`Options`)."""
    return Options(choices)


def optional(check: Constraint | Check) -> Nullable:
    """Check: None, or what ``check`` accepts (:class:`Nullable`)."""
    return Nullable(_as_constraint(check))


def any_of(*checks: Constraint | Check) -> AnyOf:
    """Check: accepted by at least one of ``checks`` (:class:`AnyOf`)."""
    return AnyOf(*map(_as_constraint, checks))


#: Check that accepts every value (for keys checked elsewhere).
anything = Anything()
#: Check: a non-empty string.
is_str = Text()
#: Check: a plain name (:class:`PlainName`).
is_plain_name = PlainName()
#: Check: ``true`` or ``false``.
is_bool = Boolean()
#: Check: a mapping.
is_mapping = Dict()
#: Check: a list.
is_list = List()


# --------------------------------------------------------------------------- keys
class YamlWord(str):
    """A YAML 1.1 boolean word (``on``, ``off``, ``yes``, ``no``) as the file wrote it.

    YAML 1.1 reads these words as booleans, so ``mode: off`` would be ``False`` where the key
    means the word ``'off'``.  The job loader (:mod:`flegel.job.yaml_file`) keeps the word and
    its boolean reading both, and :func:`settle` picks the one the key accepts: the word for a
    key that expects words (``sync.migration.mode: off``, ``output.progress: none``), the
    boolean for a key that expects ``true``/``false`` (``output.save_model: no``).  ``true``
    and ``false`` stay booleans (the words YAML 1.2 keeps).

    Parameters
    ----------
    text : str
        The word as written.
    flag : bool
        YAML 1.1's reading of it.
    """

    flag: bool

    def __new__(cls, text: str, flag: bool) -> YamlWord:
        self = super().__new__(cls, text)
        self.flag = bool(flag)
        return self

    def __reduce__(self) -> tuple[Any, tuple[str, bool]]:
        return (YamlWord, (str(self), self.flag))


def settle(rule: Constraint | Check, value: Any) -> Any:
    """``value``, or for a :class:`YamlWord` the reading ``rule`` accepts, tried in this
    order: the word as written (``off`` for ``'off'``); its boolean (``no`` for ``false``);
    for ``off``/``no``, the key's own word for off (``'off'``, else ``'none'``: so
    ``output.progress: off`` is ``'none'``).  The word itself when none is accepted, so the
    message shows what was written."""
    if not isinstance(value, YamlWord):
        return value
    text = str(value)
    tries: tuple[Any, ...] = (text, value.flag) + (() if value.flag else ("off", "none"))
    for reading in tries:
        if rule(reading):
            return reading
    return value


@dataclass(frozen=True, init=False)
class Key:
    """One key: its constraint, its default and one line of documentation.

    ``Key(constraint, default, doc)``; a rule the generated words cannot say is a
    :class:`Described` constraint (a check and its words).

    Attributes
    ----------
    constraint : Constraint
        What the value must be.
    default : Any
        The value used when the key is absent; :data:`REQUIRED` when it must be given.
    doc : str
        One line for the job reference.
    """

    constraint: Constraint
    default: Any = REQUIRED
    doc: str = ""

    def __init__(self, constraint: Constraint, default: Any = REQUIRED, doc: str = "") -> None:
        object.__setattr__(self, "constraint", constraint)
        object.__setattr__(self, "default", default)
        object.__setattr__(self, "doc", doc)

    @property
    def expected(self) -> str:
        """What the value must be, as shown in messages ("a positive integer")."""
        return self.constraint.describe()

    def check(self, value: Any) -> bool:
        """Whether ``value`` is acceptable."""
        return self.constraint.is_satisfied_by(value)

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
        super().__init__(self.wording())

    def wording(self) -> str:
        """The message."""
        return describe(self.key, self.expected, self.found, self.detail)


class ParameterError(SchemaError):
    """A constructor parameter that does not fit its declaration, in the words of
    scikit-learn-style checks: "n_clusters must be an integer >= 1, got 0".

    ``key`` is the parameter's name, so the job names ``params.<key>`` from the declaration.
    A ``detail`` is the whole message ("KMeans(device='gpu'): CuPy could not be imported").
    """

    def wording(self) -> str:
        if self.detail is not None:
            return self.detail
        return f"{self.key} must be {self.expected}, got {self.found!r}"


def describe(key: str, expected: str, found: Any = MISSING, detail: str | None = None) -> str:
    """The one wording of a problem with a key: "KEY: expected X, found Y" (or the detail).

    A detail that names the key path itself is kept as it is.
    """
    if detail is not None:
        return detail if detail.startswith(key) else f"{key}: {detail}"
    if found is MISSING:
        return f"{key}: expected {expected}, but the key is missing"
    return f"{key}: expected {expected}, found {found!r}"


# --------------------------------------------------------------------------- key builders
def _key(rule: Constraint, doc: str, default: Any, null: bool, expected: str | None) -> Key:
    if null:
        rule = Nullable(rule)
    if expected:
        rule = Described(rule, expected)
    return Key(rule, default, doc)


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
    return _key(Integer(lo, hi, unit=unit), doc, default, null, expected)


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
    rule = Real(lo, hi, lo_open=lo_open, hi_open=hi_open, unit=unit)
    return _key(rule, doc, default, null, expected)


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
    return _key(Options(choices), doc, default, null, expected)


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
    return Key(Boolean(), default, doc)


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
    return _key(Text(expected), doc, default, null, None)


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
    return _key(Dict(expected), doc, default, null, None)


# --------------------------------------------------------------------------- validation
def _join(prefix: str, key: Any) -> str:
    return f"{prefix}.{key}" if prefix else str(key)


def check_section(prefix: str, given: Any, schema: abc.Mapping[str, Key], *,
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
        else:
            value = settle(key.check, given[k])
            if not key.check(value):
                raise SchemaError(_join(prefix, k), key.expected, value)
            out[k] = value
    return out


def check_params(params: abc.Mapping[str, Constraint],
                 values: abc.Mapping[str, Any]) -> dict[str, Any]:
    """Check an algorithm's constructor arguments against its declared ``PARAMS``.

    Parameters
    ----------
    params : mapping of str to Constraint
        The declarations, in the order the arguments are checked.
    values : mapping of str to Any
        The arguments given; names not declared are left out of the result.

    Returns
    -------
    dict
        The declared arguments in the form the code uses (:meth:`Constraint.convert`: an int
        for an integer, a float for a number, a tuple for items).

    Raises
    ------
    ParameterError
        For the first argument its constraint refuses, naming it: "n_clusters must be an
        integer >= 1, got 0".
    """
    out: dict[str, Any] = {}
    for name, rule in params.items():
        if name in values:
            value = settle(rule, values[name])
            if not rule.is_satisfied_by(value):
                raise ParameterError(name, rule.describe(python=True), value)
            out[name] = rule.convert(value)
    return out


def defaults(schema: abc.Mapping[str, Key]) -> dict[str, Any]:
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
