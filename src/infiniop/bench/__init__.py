"""`infiniop bench`: our operators against NumPy and PyTorch, side by side, in GB/s and as a
fraction of the machine's copy bandwidth measured in the same run."""

from .runner import run

__all__ = ["run"]
