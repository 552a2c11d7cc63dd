"""The MPI master/worker runtime: rank 0 is the master (coordinator and parameter server),
ranks 1..n are workers holding data shards (DESIGN §4)."""

#: Seconds slept between polls while waiting.  0.5 ms keeps a waiting rank near 1% of a core
#: while a signal is still noticed well within the ~1 ms block time.
POLL_S = 5e-4
