"""TASO's binary rule file (`graph_subst.pb`): a small protobuf wire-format codec.

The schema (TASO `src/core/rules.proto`, proto2, as generated into `rules.pb.h`)::

    message Parameter { required int32 key = 1; required int32 value = 2; }
    message Tensor { required int32 opId = 1; required int32 tsId = 2; }  // opId < 0: input
    message Operator { required int32 type = 1; repeated Tensor input = 2;
                       repeated Parameter para = 3; }
    message MapOutput { required int32 srcOpId = 1; required int32 dstOpId = 2;
                        required int32 srcTsId = 3; required int32 dstTsId = 4; }
    message Rule { repeated Operator srcOp = 1; repeated Operator dstOp = 2;
                   repeated MapOutput mappedOutput = 3; }
    message RuleCollection { repeated Rule rule = 1; }

Only varints (wire type 0) and length-delimited fields (wire type 2) occur; negative int32
values are 10-byte varints (64-bit two's complement), as protobuf writes them. Unknown
fields are skipped. Operator types and parameter keys are TASO's `OpType` and
`PMParameter` enums (`include/taso/ops.h`, jiazhihao/TASO; the first 26 op types are the
same in the older `include/xflow/ops.h` the generator was built with).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from superopt.ir.errors import IRError

# TASO's enum OpType (include/taso/ops.h), in declaration order.
OP_TYPES = (
    "OP_INPUT", "OP_WEIGHT", "OP_ANY", "OP_CONV2D", "OP_DROPOUT", "OP_LINEAR", "OP_POOL2D_MAX",
    "OP_POOL2D_AVG", "OP_RELU", "OP_SIGMOID", "OP_TANH", "OP_BATCHNORM", "OP_CONCAT",
    "OP_SPLIT", "OP_RESHAPE", "OP_TRANSPOSE", "OP_EW_ADD", "OP_EW_MUL", "OP_MATMUL", "OP_MUL",
    "OP_ENLARGE", "OP_MERGE_GCONV", "OP_CONSTANT_IMM", "OP_CONSTANT_ICONV", "OP_CONSTANT_ONE",
    "OP_CONSTANT_POOL", "OP_SQUEEZE", "OP_UNSQUEEZE", "OP_EW_SUB", "OP_EW_DIV", "OP_EW_EQUAL",
    "OP_EW_GREATER", "OP_EW_LESS", "OP_EW_MAX", "OP_EW_MIN", "OP_REDUCE_ARGMAX",
    "OP_REDUCE_ARGMIN", "OP_REDUCE_MAX", "OP_REDUCE_MEAN", "OP_REDUCE_MIN", "OP_REDUCE_PROD",
    "OP_REDUCE_SUM", "OP_PAD", "OP_SHAPE", "OP_SIZE", "OP_TOPK", "OP_WHERE", "OP_CEIL",
    "OP_CAST", "OP_EXP", "OP_ROUND", "OP_LOG", "OP_LOGICAL_NOT", "OP_SQRT", "OP_LEAKYRELU",
    "OP_SLICE", "OP_RESIZE", "OP_PRELU", "OP_FUSE_CONV_BATCHNORM",
    "OP_FUSE_CONV_BATCHNORM_ALPHA_VAR", "OP_FUSE_CONV_BATCHNORM_BIAS", "OP_BROADCAST_ADD",
)
OP = {name: k for k, name in enumerate(OP_TYPES)}

# TASO's enum PMParameter (include/taso/ops.h), in declaration order.
PM_NAMES = (
    "PM_OP_TYPE", "PM_NUM_INPUTS", "PM_NUM_OUTPUTS", "PM_GROUP", "PM_KERNEL_H", "PM_KERNEL_W",
    "PM_STRIDE_H", "PM_STRIDE_W", "PM_PAD", "PM_ACTI", "PM_NUMDIM", "PM_AXIS", "PM_PERM",
    "PM_OUTSHUFFLE", "PM_MERGE_GCONV_COUNT", "PM_AXES", "PM_KEEP_DIMS",
)
PM = {name: k for k, name in enumerate(PM_NAMES)}

ACTI = {0: "none", 1: "sigmoid", 2: "relu", 3: "tanh"}  # enum ActiMode
PADDING = {0: "same", 1: "valid"}  # enum PaddingMode


class TasoPbError(IRError):
    """A TASO rule file that cannot be decoded; names the file, the rule and the problem."""


class TasoPbTooDeep(TasoPbError):
    """A rule whose operators chain deeper than any reader accepts: a corrupt or hostile
    file, so the whole file is refused (exit 2), like a truncated one."""


@dataclass
class PbTensor:
    op_id: int
    ts_id: int = 0


@dataclass
class PbOperator:
    type: int
    inputs: list[PbTensor] = field(default_factory=list)
    params: dict[int, int] = field(default_factory=dict)

    def param(self, name: str, default: int | None = None) -> int | None:
        return self.params.get(PM[name], default)


@dataclass
class PbRule:
    src: list[PbOperator] = field(default_factory=list)
    dst: list[PbOperator] = field(default_factory=list)
    mapped: list[tuple[int, int, int, int]] = field(default_factory=list)  # srcOp, dstOp, srcTs, dstTs


# ---- wire format ---------------------------------------------------------------------

class _Reader:
    def __init__(self, data: bytes, where: str) -> None:
        self.data = data
        self.pos = 0
        self.where = where

    def varint(self) -> int:
        shift, value = 0, 0
        while True:
            if self.pos >= len(self.data):
                raise TasoPbError(f"{self.where}: truncated varint at byte {self.pos}")
            b = self.data[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 63:
                raise TasoPbError(f"{self.where}: varint longer than 10 bytes at byte {self.pos}")

    def fields(self) -> Iterator[tuple[int, int, int | bytes]]:
        while self.pos < len(self.data):
            start = self.pos
            tag = self.varint()
            num, wire = tag >> 3, tag & 7
            if num == 0:
                raise TasoPbError(f"{self.where}: field number 0 at byte {start}")
            if wire == 0:
                yield num, wire, self.varint()
            elif wire == 2:
                n = self.varint()
                if self.pos + n > len(self.data):
                    raise TasoPbError(f"{self.where}: field {num} at byte {start} claims {n} "
                                      f"bytes, only {len(self.data) - self.pos} left")
                yield num, wire, self.data[self.pos:self.pos + n]
                self.pos += n
            elif wire == 1:
                self.pos += 8
            elif wire == 5:
                self.pos += 4
            else:
                raise TasoPbError(f"{self.where}: unsupported wire type {wire} at byte {start}")
            if self.pos > len(self.data):
                raise TasoPbError(f"{self.where}: truncated field {num} at byte {start}")


def _int32(v: int) -> int:
    v &= (1 << 64) - 1
    if v >= 1 << 63:
        v -= 1 << 64
    if not -(1 << 31) <= v < 1 << 31:
        raise ValueError(f"{v} does not fit an int32")
    return v


def _msg(data: bytes, where: str) -> Iterator[tuple[int, int | bytes]]:
    for num, wire, val in _Reader(data, where).fields():
        yield num, val if wire == 2 else _int32(int(val))  # type: ignore[arg-type]


def _ints(data: bytes, where: str, names: tuple[str, ...]) -> dict[str, int]:
    out: dict[str, int] = {}
    for num, val in _msg(data, where):
        if 1 <= num <= len(names) and isinstance(val, int):
            out[names[num - 1]] = val
    missing = [n for n in names if n not in out]
    if missing:
        raise TasoPbError(f"{where}: required field {missing[0]!r} is missing")
    return out


def _operator(data: bytes, where: str) -> PbOperator:
    op = PbOperator(type=-1)
    for num, val in _msg(data, where):
        if num == 1 and isinstance(val, int):
            op.type = val
        elif num == 2 and isinstance(val, bytes):
            t = _ints(val, where + " input", ("opId", "tsId"))
            op.inputs.append(PbTensor(t["opId"], t["tsId"]))
        elif num == 3 and isinstance(val, bytes):
            p = _ints(val, where + " parameter", ("key", "value"))
            op.params[p["key"]] = p["value"]
    if op.type < 0:
        raise TasoPbError(f"{where}: operator without a type")
    return op


def decode_rules(data: bytes, source: str = "<pb>") -> list[PbRule]:
    """Decode a `RuleCollection`."""
    rules: list[PbRule] = []
    try:
        for num, val in _msg(data, source):
            if num != 1 or not isinstance(val, bytes):
                continue
            where = f"{source}: rule {len(rules)}"
            rule = PbRule()
            for rnum, rval in _msg(val, where):
                if not isinstance(rval, bytes):
                    continue
                if rnum == 1:
                    rule.src.append(_operator(rval, f"{where} srcOp {len(rule.src)}"))
                elif rnum == 2:
                    rule.dst.append(_operator(rval, f"{where} dstOp {len(rule.dst)}"))
                elif rnum == 3:
                    m = _ints(rval, f"{where} mappedOutput",
                              ("srcOpId", "dstOpId", "srcTsId", "dstTsId"))
                    rule.mapped.append((m["srcOpId"], m["dstOpId"], m["srcTsId"], m["dstTsId"]))
            rules.append(rule)
    except ValueError as e:
        raise TasoPbError(f"{source}: rule {len(rules)}: {e}") from None
    except TasoPbError as e:
        where = f"{source}: rule {len(rules)}"
        if str(e).startswith(where):
            raise
        # A cut-off file fails while framing the next rule: say which one, and how many
        # were complete, instead of only a byte offset.
        raise TasoPbError(f"{where} (after {len(rules)} complete rules): truncated or "
                          f"corrupt: {str(e).removeprefix(source + ': ')}") from None
    return rules


def _varint(v: int) -> bytes:
    if v < 0:
        v += 1 << 64  # int32 negatives are written as 10-byte varints
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field_int(num: int, v: int) -> bytes:
    return _varint(num << 3) + _varint(v)


def _field_bytes(num: int, b: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(b)) + b


def _encode_op(op: PbOperator) -> bytes:
    out = _field_int(1, op.type)
    for t in op.inputs:
        out += _field_bytes(2, _field_int(1, t.op_id) + _field_int(2, t.ts_id))
    for k, v in op.params.items():
        out += _field_bytes(3, _field_int(1, k) + _field_int(2, v))
    return out


def encode_rules(rules: list[PbRule]) -> bytes:
    """Encode a `RuleCollection` the way protobuf serialises it (field order as declared)."""
    out = b""
    for r in rules:
        body = b"".join(_field_bytes(1, _encode_op(o)) for o in r.src)
        body += b"".join(_field_bytes(2, _encode_op(o)) for o in r.dst)
        for so, do, st, dt in r.mapped:
            body += _field_bytes(3, _field_int(1, so) + _field_int(2, do) + _field_int(3, st)
                                 + _field_int(4, dt))
        out += _field_bytes(1, body)
    return out


def perm_code(perm: tuple[int, ...]) -> int:
    """TASO's PM_PERM: the permutation's digits in base ndim."""
    code = 0
    for p in perm:
        code = code * len(perm) + p
    return code


def perm_decode(code: int, ndim: int) -> tuple[int, ...]:
    digits = []
    for _ in range(ndim):
        digits.append(code % ndim)
        code //= ndim
    return tuple(reversed(digits))
