"""OpenMP's wait policy for a process that mixes infiniop and PyTorch, set at ``import infiniop``.

PyTorch's OpenMP reads ``OMP_WAIT_POLICY`` when torch is imported: imported after infiniop (as
sorted imports put it), its threads then sleep between its calls instead of spinning on the
cores our kernels use (README, "Threads"). A value the user set stays.
"""

import os

OURS = "OMP_WAIT_POLICY" not in os.environ  # the policy below is ours (the bench's torch: suite._torch)
os.environ.setdefault("OMP_WAIT_POLICY", "passive")
