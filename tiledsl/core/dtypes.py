"""Scalar element types: one table that serves the front end, codegen, the runtime and the interpreter."""
from __future__ import annotations

from dataclasses import dataclass



@dataclass(frozen=True)
class DType:
    name: str
    bits: int
    kind: str            # "int", "uint", "float", "bool"
    ptx: str             # PTX scalar type suffix used in printed IR

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        return self.kind in ("int", "uint")

    @property
    def is_signed(self) -> bool:
        return self.kind == "int"

    @property
    def nbytes(self) -> int:
        return max(1, self.bits // 8)

    @property
    def np(self):
        return numpy_types()[self.name]

    def __call__(self, value):
        # T.float32(0) inside a kernel is handled by the front end; on the host it makes a numpy scalar.
        return numpy_types()[self.name](value) if self.name != "bfloat16" else float(value)

    def __repr__(self) -> str:
        return self.name


bool_ = DType("bool", 1, "bool", "pred")
int8 = DType("int8", 8, "int", "s8")
uint8 = DType("uint8", 8, "uint", "u8")
int16 = DType("int16", 16, "int", "s16")
uint16 = DType("uint16", 16, "uint", "u16")
int32 = DType("int32", 32, "int", "s32")
uint32 = DType("uint32", 32, "uint", "u32")
int64 = DType("int64", 64, "int", "s64")
uint64 = DType("uint64", 64, "uint", "u64")
float16 = DType("float16", 16, "float", "f16")
bfloat16 = DType("bfloat16", 16, "float", "bf16")
float32 = DType("float32", 32, "float", "f32")
float64 = DType("float64", 64, "float", "f64")

ALL = [bool_, int8, uint8, int16, uint16, int32, uint32, int64, uint64, float16, bfloat16, float32, float64]
# Other spellings a dtype string may use (torch's, numpy's and PTX's short names); each means its canonical dtype,
# which is what messages, the IR and `dtype.name` show.
ALIASES = {
    "f16": "float16", "fp16": "float16", "half": "float16",
    "bf16": "bfloat16",
    "f32": "float32", "fp32": "float32", "float": "float32",
    "f64": "float64", "fp64": "float64", "double": "float64",
    "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
}
BY_NAME = {d.name: d for d in ALL}
BY_NAME.update({alias: BY_NAME[name] for alias, name in ALIASES.items()})

_NUMPY = {}


def numpy_types() -> dict:
    """dtype name -> numpy scalar type (numpy is imported on first use: `import tiledsl` stays light)."""
    if not _NUMPY:
        import numpy as np
        _NUMPY.update({
            "bool": np.bool_, "int8": np.int8, "uint8": np.uint8, "int16": np.int16, "uint16": np.uint16,
            "int32": np.int32, "uint32": np.uint32, "int64": np.int64, "uint64": np.uint64,
            "float16": np.float16, "bfloat16": np.uint16, "float32": np.float32, "float64": np.float64})
    return _NUMPY

# Same-width unsigned container, used when bits are moved without interpretation.
BITS = {8: uint8, 16: uint16, 32: uint32, 64: uint64}


def lookup(name) -> DType | None:
    """The dtype a name means (a canonical name or one of ALIASES), or None."""
    if isinstance(name, DType):
        return name
    if isinstance(name, str):
        return BY_NAME.get(name)
    return None


def names_text() -> str:
    """The valid dtype names for a message: the canonical ones, then the aliases and what they mean."""
    floats = {}
    for alias, name in ALIASES.items():
        if BY_NAME[name].is_float:
            floats.setdefault(name, []).append(alias)
    aliases = ", ".join(f"{'/'.join(a)} = {n}" for n, a in floats.items())
    return (f"{', '.join(d.name for d in ALL)} (aliases: {aliases}; i8..i64 = int8..int64, "
            f"u8..u64 = uint8..uint64)")


def unknown_message(name) -> str:
    """'unknown dtype ...' and the valid names (names are case-sensitive: 'Float16' is told it means 'float16')."""
    from .errors import shown
    text = repr(name) if isinstance(name, str) else f"{type(name).__name__} {shown(name)}"
    hint = ""
    if isinstance(name, str) and name.lower() in BY_NAME:
        hint = f" (dtype names are lower case: {name.lower()!r})"
    return f"unknown dtype {text}{hint}; the dtypes are {names_text()}"


def from_array_typestr(typestr: str) -> DType | None:
    """Array-interface typestr ('<f4', '|u1', ...) to our dtype."""
    kind, size = typestr[1], int(typestr[2:])
    table = {("f", 2): float16, ("f", 4): float32, ("f", 8): float64,
             ("i", 1): int8, ("i", 2): int16, ("i", 4): int32, ("i", 8): int64,
             ("u", 1): uint8, ("u", 2): uint16, ("u", 4): uint32, ("u", 8): uint64, ("b", 1): bool_}
    return table.get((kind, size))


def promote(a: DType, b: DType) -> DType:
    """Type of a binary arithmetic result of two typed operands (C-like, without widening below 32 bits)."""
    if a == b:
        return a
    if a.is_float or b.is_float:
        if not (a.is_float and b.is_float):
            return a if a.is_float else b
        if a.bits != b.bits:
            return a if a.bits > b.bits else b
        return float32          # f16 with bf16: no common 16-bit type
    if a.kind == "bool":
        return b
    if b.kind == "bool":
        return a
    if a.bits != b.bits:
        return a if a.bits > b.bits else b
    return a if a.kind == "uint" else b


# ------------------------------------------------------------------ the one f32 -> bf16 rounder (host side)

BF16_NAN = 0x7FFF      # the canonical bf16 NaN: what PTX cvt.rn.bf16.f32 produces, and codegen's run-time cast


def bf16_bits_array(x):
    """bfloat16 bits (numpy uint16 array) of `x` (any float array or scalar, read as float64): one rounding to
    nearest even from the exact value, every NaN -> BF16_NAN, overflow -> +-inf.

    The value is first narrowed to f32 rounding to odd (an inexact result gets its last bit set), so the second
    rounding, to bf16's 8 bits, is the single correct rounding; this is what codegen's run-time conversion from
    f64 does too (lower/llvm/casts.py), so constants, casts and the interpreter agree bit for bit."""
    import numpy as np
    x = np.asarray(x, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        f = x.astype(np.float32)
    back = f.astype(np.float64)
    nan = np.isnan(x)
    inexact = (back != x) & ~nan
    over = np.abs(back) > np.abs(x)                  # rounded away from zero: step back toward it, then mark odd
    bits = f.view(np.uint32).astype(np.int64)
    bits = np.where(inexact, np.where(over, bits - 1, bits) | 1, bits)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF
    return np.where(nan, BF16_NAN, rounded).astype(np.uint16)


def bf16_bits(x: float) -> int:
    """bfloat16 bits of one Python number, as `bf16_bits_array` rounds it."""
    return int(bf16_bits_array(float(x)))
