"""The one error of a bad job: :class:`JobError`, naming the file and the key.

Every problem with a job file -- bad YAML, an unknown key, a value its declaration refuses,
data that cannot be read -- is reported as one :class:`JobError` naming the file, the key
path, what was expected and what was found; the CLI prints it and exits with code 2, without
a traceback, before any MPI work.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flegel import validation
from flegel.validation import Key, SchemaError


class JobError(ValueError):
    """A problem with a job file, reported before any work starts.

    Parameters
    ----------
    file : str or Path
        The job file.
    key : str
        Key path of the problem (``"stop.max_iterations"``, ``"stragglers[0].workers"``).
    expected : str
        What the value must be.
    found : Any
        The value found; :data:`flegel.validation.MISSING` when the key is absent.
    detail : str or None
        A complete message replacing "expected ..., found ...".
    """

    def __init__(self, file: str | Path, key: str, expected: str, found: Any = validation.MISSING,
                 detail: str | None = None) -> None:
        self.file, self.key = str(file), key
        super().__init__(f"{file}: {validation.describe(key, expected, found, detail)}")

    @classmethod
    def from_schema(cls, file: str | Path, exc: SchemaError) -> JobError:
        """The :class:`JobError` of a :class:`flegel.validation.SchemaError` in ``file``."""
        return cls(file, exc.key, exc.expected, exc.found, exc.detail)


def check_in(file: Path, prefix: str, given: Any, keys: Mapping[str, Key]) -> dict[str, Any]:
    """:func:`flegel.validation.check_section` for a section of the job file ``file``.

    Returns
    -------
    dict
        The section completed with defaults.

    Raises
    ------
    JobError
        The section's first problem, naming ``file``.
    """
    try:
        return validation.check_section(prefix, given, keys)
    except SchemaError as exc:
        raise JobError.from_schema(file, exc) from None
