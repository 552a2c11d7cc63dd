"""A process's peak resident memory, as the summary reports it per rank (issue 14)."""

from __future__ import annotations

import resource
import sys


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, in MiB.

    Used to show that a worker holds its shard (plus per-point state and a fixed interpreter
    baseline), not the file, and that the master holds no data.

    On Linux this is ``VmHWM`` of ``/proc/self/status``: the peak of this program's own
    memory.  ``getrusage``'s ``ru_maxrss`` would do, except that the kernel carries it over
    ``exec`` from the process that started this one (a large parent, e.g. pytest or a
    notebook, makes a small child look large).  Elsewhere ``ru_maxrss`` is used (bytes on
    macOS, KiB on other systems).

    Returns
    -------
    float
        MiB, to 0.1.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)  # the line is in kB
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    scale = 1 << 20 if sys.platform == "darwin" else 1 << 10
    return round(peak / scale, 1)
