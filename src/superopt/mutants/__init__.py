"""PET: partially equivalent mutants of multi-linear subprograms (DESIGN.md section 7).

- `boxes`: per-op box rules (table "boxes"): cut points, point evaluation, restriction;
- `points`: exact evaluation of a program at chosen output positions mod p;
- `boxtest`: the region test (Theorems 1 and 2 of PET) and its exhaustive cross-check;
- `subprograms`: multi-linear subprograms of a model;
- `families`, `generator`: mutant enumeration (depth-first search and the published
  transformation families);
- `search`: the model-level pipeline behind `superopt mutants`.

The wrong boxes are repaired by `superopt.corrector`.
"""

from superopt.mutants.boxes import TABLE, BoxError, Grid, Region, output_grids, propagate
from superopt.mutants.boxtest import BoxReport, OutputBoxes, box_test, exhaustive_equal

__all__ = ["TABLE", "BoxError", "BoxReport", "Grid", "OutputBoxes", "Region", "box_test",
           "exhaustive_equal", "output_grids", "propagate"]
