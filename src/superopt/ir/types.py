"""Tensor types: a dtype and a static shape. The IR is statically shaped throughout."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

import numpy as np


class DType(StrEnum):
    """Element types a graph value may carry. Floats run as float64 in the reference
    semantics and as residues mod p in the exact semantics."""

    F32 = "f32"
    BF16 = "bf16"
    F16 = "f16"
    I64 = "i64"
    I32 = "i32"
    I16 = "i16"  # 16- and 8-bit integers: XLA's s16/u16 and pred/s8/u8 arrays (HLO import)
    I8 = "i8"
    BOOL = "bool"  # comparison results and masks; 0/1 in the integer semantics

    @property
    def is_float(self) -> bool:
        return self in (DType.F32, DType.BF16, DType.F16)

    @property
    def itemsize(self) -> int:
        return {"f32": 4, "bf16": 2, "f16": 2, "i64": 8, "i32": 4, "i16": 2,
                "i8": 1, "bool": 1}[self.value]

    @property
    def numpy(self) -> np.dtype:
        # bf16 has no numpy dtype; float32 is the nearest storage type for host data.
        return np.dtype({"f32": np.float32, "bf16": np.float32, "f16": np.float16,
                         "i64": np.int64, "i32": np.int32, "i16": np.int16,
                         "i8": np.int8, "bool": np.bool_}[self.value])

    @staticmethod
    def parse(text: str | DType) -> DType:
        if isinstance(text, DType):
            return text
        aliases = {"float32": "f32", "float": "f32", "bfloat16": "bf16", "float16": "f16",
                   "half": "f16", "int64": "i64", "long": "i64", "int32": "i32", "int": "i32",
                   "int16": "i16", "int8": "i8",
                   "boolean": "bool"}
        key = aliases.get(text, text)
        try:
            return DType(key)
        except ValueError:
            raise ValueError(f"unknown dtype {text!r}; expected one of "
                             f"{', '.join(d.value for d in DType)}") from None


@dataclass(frozen=True, slots=True)
class TensorType:
    """Static shape and element type of one graph value."""

    shape: tuple[int, ...]
    dtype: DType = DType.F32

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def with_shape(self, shape: tuple[int, ...]) -> TensorType:
        return TensorType(tuple(int(d) for d in shape), self.dtype)

    def __str__(self) -> str:
        return f"{self.dtype.value}[{','.join(str(d) for d in self.shape)}]"


# onnxruntime's input type names -> numpy dtypes (what the reference's feeds are cast to
# when a graph runs in onnxruntime).
ORT_DTYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64,
              "tensor(float16)": np.float16, "tensor(int64)": np.int64,
              "tensor(int32)": np.int32, "tensor(bool)": np.bool_}
