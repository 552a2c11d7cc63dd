"""Which sync models' block sizers start from the kernel's cost measured at warm-up (issue 19,
Fig. 8; :meth:`flegel.runtime.blocksize.BlockSizer.seed`).

BSP's block is chosen before the training clock starts, from the per-call and per-point cost
worker 1 times at warm-up (:func:`flegel.sync.bsp.measures_block`): 16,384 points, two blocks
of a 27,500-point shard of Fig. 8's logistic regression.  FSP's block sizer started at the
device's 64 points and grew at most 4x a block, so FSPV's calibration pass ran 8-16 blocks
(67 where a first block was preempted and the sizer shrank), each paying the loop's fixed
work and a new wait for a core: its first θ came 4-7 ms after BSPV's in 6 of 6 pairs.  With
the same measurement broadcast to every worker (:mod:`flegel.run`), an FSP worker's first
block is the size its sizer aims at for ``runtime.block_ms``; the sizer adapts from that
block's timing on, as before.  A worker that straggler patterns slow keeps the ramp
(:func:`flegel.runtime.worker.seed_sizer`: its delays come after a block, for its points).

Only FSP: the other models' iterations are not measured against BSP's first θ here, and a
seed changes the first blocks of every run (ASP's and SSP's batches are counted in them).
"""

from __future__ import annotations

#: The sync models (keys of :data:`flegel.sync.MODELS`) whose workers' sizers are seeded.
SEEDED_MODELS = frozenset({"fsp"})


def seeds_sizer(model: str) -> bool:
    """Whether worker 1 times its kernel at warm-up and every worker's block sizer starts
    from that cost, which the master broadcasts (module notes)."""
    return model in SEEDED_MODELS
