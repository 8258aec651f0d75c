"""createpolicy on the interpreter. The policy's bits are the hardware's secret; the interpreter writes a tag of its
own (priorities in the top byte, the fraction's f32 bits below). Only cache hints read a policy, and hints change
no result."""
from __future__ import annotations

import numpy as np

from ...interpreter.operands import native_error, operand, predicated
from ...ir import nodes as ir
from .pattern import PRIMARY, SECONDARY, Form


def semantics(n: ir.Native, cx):
    form: Form = n.form
    if len(n.groups) not in (1, 2) or not isinstance(n.groups[0][0], ir.Reg):
        raise native_error(n, "operands are a 64-bit destination{, fraction}")
    d = operand(n.groups[0][0], cx)
    # as written before the re-layering: without a secondary priority the whole tag is 0 (the conditional
    # expression binds loosest); the tag is opaque, so only its stability matters
    top = (PRIMARY.index(form.primary) << 4) | (1 + SECONDARY.index(form.secondary) if form.secondary else 0)
    frac = n.groups[1][0] if len(n.groups) > 1 else None
    fop, fixed = None, 0x3F800000                  # PTX's default fraction, 1.0
    if isinstance(frac, ir.Imm):
        fixed = int(frac.text[2:], 16)             # 0fXXXXXXXX
    elif frac is not None:
        fop = operand(frac, cx)

    def core(m, idx):
        bits = np.full(m.n(idx), fixed, np.uint64) if fop is None else fop.read(m, idx).astype(np.uint64)
        d.store(m, idx, (np.uint64(top) << np.uint64(56)) | bits)
    return predicated(core, n, cx, [d])
