"""The job: key declarations, loading, ``--set``, validation and the job reference."""
