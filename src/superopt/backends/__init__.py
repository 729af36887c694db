"""Real execution backends: lower an IR graph to a framework and run or time it.

`superopt.backends.torch` (PyTorch; CPU, or CUDA when present) is imported on demand so
that importing this package stays free of torch. Importing this package asks OpenMP for
passive waiting before torch loads: spinning worker threads distort CPU timings.
"""

import os
import sys

# Whether torch was loaded before we could set the policy (then it may not be in force).
TORCH_PRELOADED: bool = "torch" in sys.modules
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

BACKENDS: tuple[str, ...] = ("torch",)
