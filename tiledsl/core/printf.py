"""`T.device_print`'s format strings: the C printf conversions tiledsl accepts, checked against the values' dtypes.

One reading of the format serves the front end (the compile-time check), codegen (how each value is promoted for
C varargs before it is packed for `vprintf`) and the interpreter (the same text formatted on the host).

Accepted: `%%` and `%[flags][width][.precision][length]conv` with flags from `-+ #0`, a literal width and precision
(no `*`), and
  - `d i` (signed) and `u x X o` (unsigned, the value's bits): an integer or bool value; a 64-bit value needs the
    `l` or `ll` length and a narrower one must have no length (C varargs pass it as a 32-bit int);
  - `f F e E g G`: a float value of any width (passed as a double);
  - `c`: an integer of at most 32 bits (the character with that code).
`%s`, `%p`, `%n`, `%a` and `*` widths are refused: a kernel has no strings or pointers to print.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from . import dtypes as dt

_SPEC = re.compile(r"%(?P<flags>[-+ #0]*)(?P<width>\d+|\*)?(?:\.(?P<prec>\d+|\*))?(?P<len>hh|h|ll|l|L|z|j|t)?"
                   r"(?P<conv>.?)", re.S)
INT_SIGNED, INT_UNSIGNED, FLOATS = "di", "uxXo", "fFeEgG"


@dataclass(frozen=True)
class Conversion:
    text: str            # as written, e.g. "%08.3f"
    conv: str            # the conversion letter
    length: str          # "", "l", "ll", ...

    @property
    def host(self) -> str:
        """The same conversion for Python's `%` operator (which has no length modifiers nor `u`)."""
        return self.text[:-1 - len(self.length)] + ("d" if self.conv == "u" else self.conv)


def parse(fmt: str) -> tuple[list, list]:
    """(literal pieces, conversions) of `fmt`: len(pieces) == len(conversions) + 1, `%%` folded into the pieces.
    Raises ValueError naming the first conversion tiledsl does not accept."""
    pieces, convs, cur, pos = [], [], "", 0
    while True:
        k = fmt.find("%", pos)
        if k < 0:
            pieces.append(cur + fmt[pos:])
            return pieces, convs
        cur += fmt[pos:k]
        if fmt.startswith("%%", k):
            cur += "%"
            pos = k + 2
            continue
        m = _SPEC.match(fmt, k)
        text, conv = m.group(0), m.group("conv")
        if not conv:
            raise ValueError("the format ends with a lone '%' (write '%%' for a percent sign)")
        if "*" in text:
            raise ValueError(f"'{text}': widths and precisions given as '*' are not supported; write them in the "
                             f"format")
        if conv in "sp":
            raise ValueError(f"'{text}': device_print prints numbers only ({'%s needs a string' if conv == 's' else '%p needs a pointer'}); put constant text in the format")
        if conv not in INT_SIGNED + INT_UNSIGNED + FLOATS + "c":
            raise ValueError(f"'{text}' is not a supported conversion (use %d %i %u %x %X %o %c for integers, "
                             f"%f %e %g (and capitals) for floats, %% for a percent sign)")
        length = m.group("len") or ""
        if length not in ("", "l", "ll"):
            raise ValueError(f"'{text}': the length modifier '{length}' is not supported (only l and ll, for "
                             f"64-bit integers)")
        if length and conv not in INT_SIGNED + INT_UNSIGNED:
            raise ValueError(f"'{text}': the length modifier '{length}' applies to integer conversions only")
        convs.append(Conversion(text, conv, length))
        pieces.append(cur)
        cur, pos = "", m.end()


def mismatch(c: Conversion, d: dt.DType) -> str | None:
    """Why a value of dtype `d` cannot be printed with `c`, or None when it can."""
    is_int = d.is_int or d.kind == "bool"
    if c.conv in FLOATS:
        return None if d.is_float else f"'{c.text}' needs a float value, got {d.name}"
    if not is_int:
        return f"'{c.text}' needs an integer value, got {d.name} (print floats with %f, %e or %g)"
    if c.conv == "c":
        return None if d.bits <= 32 else f"'{c.text}' needs an integer of at most 32 bits, got {d.name}"
    if d.bits == 64 and not c.length:
        return f"'{c.text}' prints a 32-bit int but the value is {d.name}; write '%l{c.conv}' (or '%ll{c.conv}')"
    if d.bits < 64 and c.length:
        return f"'{c.text}' prints a 64-bit int but the value is {d.name}; write '%{c.conv}' or cast it to int64"
    return None


def promoted(d: dt.DType) -> dt.DType:
    """The dtype C varargs pass a value of `d` as: floats as double, narrower ints (and bool) as 32-bit."""
    if d.is_float:
        return dt.float64
    if d.bits < 32:
        return dt.int32 if d.is_signed else dt.uint32
    return d


def host_text(pieces: list, convs: list, values: list) -> str:
    """The text one thread prints: `values` are Python ints (the promoted value) and floats, one per conversion."""
    out = [pieces[0]]
    for c, v, p in zip(convs, values, pieces[1:]):
        if c.conv in INT_UNSIGNED:
            v = int(v) % (1 << (64 if c.length else 32))           # C prints the bits as unsigned
        elif c.conv in INT_SIGNED:
            bits = 64 if c.length else 32
            v = (int(v) + (1 << (bits - 1))) % (1 << bits) - (1 << (bits - 1))   # C reads the bits as signed
        elif c.conv == "c":
            v = chr(int(v) % 256)
        out.append((c.host % v) + p)
    return "".join(out)
