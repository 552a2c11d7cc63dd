"""How a job ends early: one exception that carries the exit code and the one-line message.

Anything that must end a job before it finishes -- a stalled or dead worker, NaN in an
aggregator, a signal, an exception on a worker reported to the master -- raises
:class:`JobFault` where it is found (the parameter server, the transport, the run wiring).
The master catches it once (:mod:`flegel.run`): it saves the last good θ, prints the message
once, and ends every rank with the fault's exit code (``docs/exit-codes.md``).  The server
and the transport stay free of process management, so in-process tests see the same
exception the MPI run acts on.
"""

from __future__ import annotations

from flegel.protocol import ExitCode, StopReason


class JobFault(Exception):  # noqa: N818 - also a signal or a stall, not only an error
    """The job must end now, with ``code``; ``str(fault)`` is the message users see.

    Parameters
    ----------
    message : str
        One line naming the rank, what it was doing and what went wrong.
    code : int
        The exit status of the job (:class:`flegel.protocol.ExitCode`).
    reason : StopReason
        Recorded as the run's ``stop_reason``.
    """

    def __init__(self, message: str, code: int = ExitCode.FAILED,
                 reason: StopReason = StopReason.FAILED) -> None:
        super().__init__(message)
        self.code = int(code)
        self.reason = reason


class Interrupted(JobFault):
    """SIGINT or SIGTERM reached a rank: the user (or a scheduler) ends the job."""

    def __init__(self, signum: int) -> None:
        import signal

        name = signal.Signals(signum).name
        super().__init__(f"interrupted by {name}", ExitCode.for_signal(signum),
                         StopReason.INTERRUPTED)
        self.signum = signum
