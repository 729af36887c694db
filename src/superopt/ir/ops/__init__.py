"""The closed op set. Importing this package registers every op exactly once."""

from superopt.ir.ops import (  # noqa: F401  (imported for registration)
    activation,
    attention,
    constants,
    elementwise,
    index,
    linear,
    misc,
    movement,
    pool,
    reduce,
    sources,
)
