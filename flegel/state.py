"""What a component keeps across a checkpoint: the small protocol checkpoints are built on.

A checkpoint (:mod:`flegel.rundir.checkpoint`) does not know the sync models, interval adjustors,
stores or straggler patterns it saves: each of them *opts in* by implementing
:class:`Stateful` -- ``checkpoint_state()`` returns what it needs to continue, as plain
picklable data, and ``restore(state)`` puts it back into an object built afresh from the
same job.  The runtime only ever calls these two methods.

:class:`AttributeState` is the default implementation: every instance attribute except the
ones a class lists in ``NOT_STATE`` (references to the server or to options, which the
resumed job rebuilds).  A component whose attributes are all plain data (counters, lists,
NumPy arrays, random generators) needs nothing more; one that holds other stateful
components names them in ``NESTED`` so that they are saved through their own ``checkpoint_state()``.
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar, Protocol, runtime_checkable


@runtime_checkable
class Stateful(Protocol):
    """A component that can be checkpointed and resumed."""

    def checkpoint_state(self) -> dict[str, Any]:
        """What this component needs to continue: plain, picklable data (a copy)."""
        ...

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (an earlier :meth:`checkpoint_state` of the same kind of
        object)."""
        ...


class AttributeState:
    """:class:`Stateful` by attributes: all of them but :attr:`NOT_STATE`, nested
    :class:`Stateful` ones (:attr:`NESTED`) through their own methods."""

    #: Attributes the resumed job rebuilds (references to other objects, options).
    NOT_STATE: ClassVar[tuple[str, ...]] = ()
    #: Attributes that are :class:`Stateful` components themselves (None allowed).
    NESTED: ClassVar[tuple[str, ...]] = ()

    def checkpoint_state(self) -> dict[str, Any]:
        """Every attribute but :attr:`NOT_STATE`, deep-copied (the object goes on changing
        while the checkpoint is written); :attr:`NESTED` ones by their own
        ``checkpoint_state()``."""
        out: dict[str, Any] = {}
        for name, value in vars(self).items():
            if name in self.NOT_STATE:
                continue
            if name in self.NESTED and value is not None:
                out[name] = {"\0nested": value.checkpoint_state()}
            else:
                out[name] = copy.deepcopy(value)
        return out

    def restore(self, state: dict[str, Any]) -> None:
        """Set the attributes of ``state``; nested components restore themselves."""
        for name, value in state.items():
            if isinstance(value, dict) and "\0nested" in value:
                getattr(self, name).restore(value["\0nested"])
            else:
                setattr(self, name, value)
