"""PET's corrector: exact repairs of partially equivalent mutants (DESIGN.md section 7).

- `regions`: correction regions covering the wrong boxes, and the original program
  restricted to a region (the input slice that feeds it);
- `correct`: mutant + fused correction kernels + reassembly, checked fully equivalent;
  costs (FLOPs, bytes) with weight-only work folded;
- `export`: the corrected program as a PET rule of the project's rule model.
"""

from superopt.corrector.correct import (
    CorrectedMutant,
    Correction,
    CorrectionError,
    Cost,
    correct,
    cost,
    fold_weights,
)
from superopt.corrector.regions import RegionBuilder, correction_regions

__all__ = ["CorrectedMutant", "Correction", "CorrectionError", "Cost", "RegionBuilder", "correct",
           "correction_regions", "cost", "fold_weights"]
