"""Learned cost models for the tuner (DESIGN.md section 9): one interface
(`base.CostModel`: fit/predict/score/save/load) and `create("analytical"|"gbt"|"graphsage")`;
the data (`dataset`), the features (`features`), the metrics (`metrics`) and the tuner's
top-k ranking (`topk`). Heavy libraries (xgboost, torch) load only inside the models."""

from superopt.xtat.models.base import MODELS, CostModel, ModelError, create, load_model

__all__ = ["MODELS", "CostModel", "ModelError", "create", "load_model"]
