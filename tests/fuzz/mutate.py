"""Mutation operators on a seed's source text. Each takes the region's lines and a random.Random, changes the
lines in place and returns a short description of what it did (or None when it found nothing to change)."""
from __future__ import annotations

import keyword
import re

TOKEN = re.compile(r"""(?P<str>"[^"\\\n]*"|'[^'\\\n]*')"""
                   r"|(?P<num>0[xX][0-9a-fA-F]+|\d+\.\d*(?:[eE][-+]?\d+)?|\d+(?:[eE][-+]?\d+)?)"
                   r"|(?P<name>[A-Za-z_]\w*)"
                   r"|(?P<op>\*\*|//|==|!=|<=|>=|->|[-+*/%@&|^~<>=:,.()\[\]{}])")

DTYPES = ["float32", "float16", "bfloat16", "float64", "int32", "uint32", "int64", "uint64", "int16", "uint16",
          "int8", "uint8", "bool", "float8", "float8_e4m3", "complex64", "object", "int4", ""]
SCOPES = ["thread", "warp", "warpgroup", "cta", "cluster", "grid", "block", ""]
QUALIFIERS = ["f32", "f16", "bf16", "f64", "s32", "u32", "b32", "b16", "b64", "b8", "u64", "s64", "s16", "u16",
              "f16x2", "bf16x2", "f32x2", "tf32", "e4m3", "s8", "u8", "rn", "rz", "rm", "rp", "rni", "rzi", "ftz",
              "sat", "relu", "satfinite", "approx", "full", "lo", "hi", "wide", "NaN", "x1", "x2", "x4", "trans",
              "m8n8", "m16n8k16", "m16n8k8", "m16n8k32", "m8n8k4", "m16n8k4", "row", "col", "sync", "aligned",
              "shared", "global", "local", "param", "const", "ca", "cg", "cs", "nc", "wb", "v2", "v4", "v8",
              "L2::cache_hint", "L2::128B", "shared::cta", "shared::cluster", "mbarrier::complete_tx::bytes",
              "async", "bulk", "commit_group", "wait_group", "mma", "fma", "add", "mov", "cvt", "ld", "st",
              "ldmatrix", "stmatrix", "cp", "mbarrier", "fence", "proxy"]
AXES = ["laneid", "warpid", "tid_in_wg", "wid_in_wg"]
KEYWORDS = ["scope", "pred", "preserve_dst", "layout", "chunk_bytes", "copy_bytes", "grid", "block", "launch",
            "target", "axis", "cache_policy", "shape", "dtype", "swizzle", "src_bytes", "cluster"]


def tokens(line):
    return [m for m in TOKEN.finditer(line) if not line[:m.start()].lstrip().startswith("#")]


def _put(lines, i, m, text):
    lines[i] = lines[i][:m.start()] + text + lines[i][m.end():]


def _pick_token(lines, rng, kind=None, pred=None):
    """A random (line index, match) among the region's tokens of `kind` that satisfy `pred`."""
    found = [(i, m) for i, line in enumerate(lines) for m in tokens(line)
             if (kind is None or m.lastgroup == kind) and (pred is None or pred(m.group()))]
    return rng.choice(found) if found else (None, None)


def _code_line(lines, rng):
    idx = [i for i, t in enumerate(lines) if t.strip() and not t.strip().startswith("#")]
    return rng.choice(idx) if idx else None


def line_swap(lines, rng):
    i = _code_line(lines, rng)
    if i is None:
        return None
    j = min(len(lines) - 1, max(0, i + rng.choice([-3, -2, -1, 1, 2, 3])))
    lines[i], lines[j] = lines[j], lines[i]
    return f"swap @@{i} and @@{j}"


def line_drop(lines, rng):
    i = _code_line(lines, rng)
    if i is None:
        return None
    indent = lines[i][:len(lines[i]) - len(lines[i].lstrip())]
    old, lines[i] = lines[i], indent + "pass"          # keeps the block non-empty, so the mutant stays Python
    return f"drop @@{i}: {old.strip()}"


def line_dup(lines, rng):
    i = _code_line(lines, rng)
    if i is None:
        return None
    lines.insert(i, lines[i])
    return f"duplicate @@{i}: {lines[i].strip()}"


def _token_op(lines, rng, op):
    i = _code_line(lines, rng)
    if i is None:
        return None
    toks = tokens(lines[i])
    if len(toks) < 2:
        return None
    k = rng.randrange(len(toks) - 1)
    a, b = toks[k], toks[k + 1]
    line = lines[i]
    if op == "swap":
        lines[i] = line[:a.start()] + b.group() + line[a.end():b.start()] + a.group() + line[b.end():]
    elif op == "drop":
        lines[i] = line[:a.start()] + line[a.end():]
    else:
        lines[i] = line[:a.end()] + " " + a.group() + line[a.end():]
    return f"token {op} {a.group()!r} on @@{i}"


def token_swap(lines, rng):
    return _token_op(lines, rng, "swap")


def token_drop(lines, rng):
    return _token_op(lines, rng, "drop")


def token_dup(lines, rng):
    return _token_op(lines, rng, "dup")


def number(lines, rng):
    i, m = _pick_token(lines, rng, "num")
    if m is None:
        return None
    text = m.group()
    try:
        n = int(text, 0)
    except ValueError:
        n = int(float(text))
    new = rng.choice(["0", "-1", "1", str(n + 1), str(n - 1), str(2 * n), str(n // 2), f"{n}.5", "-" + text,
                      "2147483648", "4294967296", "65536", "(2**63)", "(10**30)", "(-(2**31))", "(10**5000)",
                      "float('nan')", "float('inf')", "1e300", "True", "None", "0.0"])
    _put(lines, i, m, new)
    return f"number {text} -> {new} on @@{i}"


def dtype(lines, rng):
    i, m = _pick_token(lines, rng, "str", lambda s: s[1:-1] in DTYPES)
    if m is None:
        return None
    new = rng.choice(DTYPES)
    _put(lines, i, m, repr(new))
    return f"dtype {m.group()} -> {new!r} on @@{i}"


def _opcode_str(s):
    return "." in s and " " not in s and len(s) > 4


def qualifier(lines, rng):
    i, m = _pick_token(lines, rng, "str", _opcode_str)
    if m is None:
        return None
    q = m.group()[1:-1].split(".")
    k = rng.randrange(len(q))
    how = rng.choice(["replace", "replace", "replace", "drop", "dup", "swap"])
    if how == "replace":
        q[k] = rng.choice(QUALIFIERS)
    elif how == "drop" and len(q) > 1:
        del q[k]
    elif how == "dup":
        q.insert(k, q[k])
    elif k + 1 < len(q):
        q[k], q[k + 1] = q[k + 1], q[k]
    new = ".".join(q)
    _put(lines, i, m, repr(new))
    return f"opcode {m.group()} -> {new!r} on @@{i}"


def scope(lines, rng):
    i, m = _pick_token(lines, rng, "str", lambda s: s[1:-1] in SCOPES)
    if m is None:
        return None
    new = rng.choice(SCOPES)
    _put(lines, i, m, repr(new))
    return f"scope {m.group()} -> {new!r} on @@{i}"


def layout(lines, rng):
    """Layout strides and axes: swap the lane/warp axis a stride names, drop one `@ axis`, or put an axis on a
    plain stride of an S[...] line."""
    how = rng.choice(["axis", "drop", "add"])
    if how == "axis":
        i, m = _pick_token(lines, rng, "name", lambda s: s in AXES)
        if m is not None:
            new = rng.choice(AXES)
            _put(lines, i, m, new)
            return f"axis {m.group()} -> {new} on @@{i}"
    cand = [i for i, t in enumerate(lines) if "S[" in t]
    if not cand:
        return None
    i = rng.choice(cand)
    if how == "drop":
        ats = list(re.finditer(r"\s*@\s*\w+", lines[i]))
        if ats:
            m = rng.choice(ats)
            _put(lines, i, m, "")
            return f"drop {m.group().strip()!r} on @@{i}"
    nums = [m for m in tokens(lines[i]) if m.lastgroup == "num"]
    if not nums:
        return None
    m = rng.choice(nums)
    new = f"{m.group()} @ {rng.choice(AXES)}"
    _put(lines, i, m, new)
    return f"stride {m.group()} -> {new} on @@{i}"


def name_swap(lines, rng):
    names = sorted({m.group() for line in lines for m in tokens(line)
                    if m.lastgroup == "name" and not keyword.iskeyword(m.group())})
    i, m = _pick_token(lines, rng, "name", lambda s: not keyword.iskeyword(s))
    if m is None or len(names) < 2:
        return None
    new = rng.choice(names)
    _put(lines, i, m, new)
    return f"name {m.group()} -> {new} on @@{i}"


def string_swap(lines, rng):
    strs = sorted({m.group() for line in lines for m in tokens(line) if m.lastgroup == "str"})
    i, m = _pick_token(lines, rng, "str")
    if m is None:
        return None
    new = rng.choice(strs)
    _put(lines, i, m, new)
    return f"string {m.group()} -> {new} on @@{i}"


def keyword_arg(lines, rng):
    found = [(i, m) for i, t in enumerate(lines) for m in re.finditer(r"\b(\w+)=(?!=)", t)]
    if not found:
        return None
    i, m = rng.choice(found)
    new = rng.choice(KEYWORDS) + "="
    _put(lines, i, m, new)
    return f"keyword {m.group()} -> {new} on @@{i}"


# weights: the operators that keep the mutant Python (and so reach the compiler) are picked more often
OPERATORS = [(number, 6), (qualifier, 5), (dtype, 3), (scope, 2), (layout, 3), (name_swap, 3), (string_swap, 2),
             (keyword_arg, 2), (line_swap, 2), (line_drop, 2), (line_dup, 2), (token_swap, 1), (token_drop, 1),
             (token_dup, 1)]


def mutate(text, region, rng):
    """The mutated text and the list of mutations applied (1 to 3 of them, inside region)."""
    lines = text.splitlines()
    first, last = region
    body = lines[first:last + 1]
    done = []
    want = rng.choices([1, 2, 3], weights=[6, 3, 1])[0]
    for _ in range(want * 4):
        if len(done) == want:
            break
        op = rng.choices([o for o, _ in OPERATORS], weights=[w for _, w in OPERATORS])[0]
        what = op(body, rng)
        if what:       # the operators count lines from the region's start; the file's line numbers are shown
            done.append(re.sub(r"@@(\d+)", lambda m: f"line {first + int(m.group(1)) + 1}", what))
    return "\n".join(lines[:first] + body + lines[last + 1:]) + "\n", done
