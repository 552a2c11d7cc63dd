"""flegel: distributed iterative machine learning that stays fast when some workers are slow."""

from flegel.api import Aggregator, Algorithm, DataInfo, Params
from flegel.block import Block, PointState

__version__ = "0.1.0"

__all__ = ["Algorithm", "Aggregator", "Block", "DataInfo", "Params", "PointState", "__version__"]
