"""The ``flegel`` command: its commands, the launcher and its rank watch, compare and report."""
