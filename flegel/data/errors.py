"""The one exception the data layer raises for bad data specs and bad data files.

Every message has the same three parts so that a user can fix the job without reading code:

``<key path>: <file>: <what was found>, expected <what should be there>``

for example ``data.path: /x/y.csv: row 17 (line 18) has 5 columns, expected 29``.  The file part
is left out when the problem is in the job spec itself (``data.format: expected one of ...,
found 'parquet'``).
"""

from __future__ import annotations

from os import PathLike

__all__ = ["DataError"]


class DataError(ValueError):
    """A data spec or data file that cannot be used.

    It subclasses :class:`ValueError` so that callers that only know about bad values still
    catch it, while the job runner can single it out and report it before any work starts.

    Parameters
    ----------
    problem : str
        What is wrong: what was found and what was expected.
    key : str, optional
        Key path of the spec entry the problem belongs to, e.g. ``"data.path"``.
    path : str or os.PathLike, optional
        The file the problem was found in.

    Attributes
    ----------
    problem, key, path
        The parts of the message, kept for programmatic use (``path`` as a string or None).
    """

    def __init__(
        self, problem: str, *, key: str | None = None, path: str | PathLike[str] | None = None
    ) -> None:
        self.problem = problem
        self.key = key
        self.path = None if path is None else str(path)
        parts = [p for p in (key, self.path) if p]
        super().__init__(": ".join([*parts, problem]))
