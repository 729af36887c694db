"""Search strategies behind one ask/tell interface: `create("anneal", **opts)`."""

from superopt.xtat.strategies.base import STRATEGIES, SearchStrategy, create, register

__all__ = ["STRATEGIES", "SearchStrategy", "create", "register"]
