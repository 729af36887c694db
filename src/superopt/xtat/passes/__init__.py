"""The tuner's passes, in pipeline order: plan, rewrite, layout, fusion, tiling, flags."""

from superopt.xtat.passes.base import PassError, PassResult, TunablePass

__all__ = ["PassError", "PassResult", "TunablePass"]
