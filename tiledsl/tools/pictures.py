"""Pictures of a TileLayout: which thread owns each element of a view, and in which register slot.

Every cell of the picture is one coordinate of the view, labelled `T<thread>R<reg>`: `reg` is the layout's
storage offset (the register slot for a register tensor), `thread` is the execution offset the layout names
(the lane for `@ laneid` layouts; in general laneid + tx + tid_in_wg + 32 * (warpid + wid_in_wg)). Cells are
coloured by thread, so the lane map reads at a glance.

How a view of any rank becomes one 2-D picture:
- a 1-D view `(n,)` is drawn as one row of `n` cells;
- a 2-D view `(H, W)` is an H x W grid;
- a view `(*lead, P, H, W)` is a grid of H x W panels: the last leading dimension `P` runs left to right and
  the earlier leading dimensions, flattened row-major, run top to bottom. Each panel is headed by its
  coordinate (e.g. `[0, 1, :, :]`). For the mma operands this reproduces the matrix itself: A's
  `(M_rep, K_rep, 16, k/2)` becomes the whole M x K/2 word matrix, D's `(M_rep, N_rep, 16, 8)` the M x N one.

`ownership_grid` returns the same arrangement as data: picture cell `(row, col)` (panel gaps not counted) ->
`(thread, reg)`. The SVG is plain XML text; the PNG is rasterised here with a built-in 5x7 bitmap font and
written with zlib + struct, so neither needs a plotting library.
"""
from __future__ import annotations

import colorsys
import struct
import zlib
from itertools import product
from xml.sax.saxutils import escape

from ..core.errors import LayoutError

MAX_CELLS = 1 << 16            # a picture is for reading; refuse views that would make megapixel files

# Geometry in pixels, shared by the SVG and the PNG so both pictures put every cell in the same place.
SCALE = 2                      # PNG font scale: one font pixel is SCALE x SCALE image pixels
GLYPH_W, GLYPH_H = 5, 7
ADVANCE = (GLYPH_W + 1) * SCALE
TEXT_H = GLYPH_H * SCALE
PAD = 4
CELL_H = TEXT_H + 2 * PAD + 2
MARGIN = 8
PANEL_GAP = 12
HEADER_H = TEXT_H + 2 * PAD    # panel header line, only for views with leading dimensions

BACKGROUND = (255, 255, 255)
INK = (20, 20, 20)
GRID = (90, 90, 90)
DIM_INK = (110, 110, 110)


# ------------------------------------------------------------------ ownership

def _arrangement(shape):
    """(H, W, panel rows, panel cols, leading shape) of the picture of a view of `shape`."""
    shape = tuple(shape)
    if not shape or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape):
        raise LayoutError(f"a picture needs a view shape of positive ints, got {shape!r}")
    if len(shape) == 1:
        h, w, lead = 1, shape[0], ()
    else:
        h, w, lead = shape[-2], shape[-1], shape[:-2]
    pcols = lead[-1] if lead else 1
    prows = 1
    for d in lead[:-1]:
        prows *= d
    if prows * pcols * h * w > MAX_CELLS:
        raise LayoutError(f"a view of shape {shape} has more than {MAX_CELLS} elements; draw a smaller view")
    return h, w, prows, pcols, lead


def _cells(layout: TileLayout, shape):
    """Yield (row, col, view coordinate, thread, reg) for every element, in picture order."""
    shape = tuple(shape)
    h, w, prows, pcols, lead = _arrangement(shape)
    for lc in product(*(range(d) for d in lead)):
        outer = 0
        for d, c in zip(lead[:-1], lc[:-1]):
            outer = outer * d + c
        pc = lc[-1] if lead else 0
        for r, c in product(range(h), range(w)):
            coord = lc + ((r, c) if len(shape) > 1 else (c,))
            own = layout.owner(coord, shape)
            yield outer * h + r, pc * w + c, coord, own.thread, own.slot


def ownership_grid(layout: TileLayout, shape) -> dict:
    """Picture cell (row, col) -> (thread, reg) for every element of the view (see the module doc)."""
    return {(r, c): (t, g) for r, c, _, t, g in _cells(layout, shape)}


def label(thread: int, reg: int) -> str:
    return f"T{thread}R{reg}"


def colour(thread: int) -> tuple:
    """A pastel colour per lane; neighbouring lanes get far-apart hues, later warps a darker shade."""
    lane, warp = thread % 32, thread // 32
    hue = ((lane * 11) % 32) / 32.0
    light = 0.82 - 0.08 * (warp % 4)
    r, g, b = colorsys.hls_to_rgb(hue, light, 0.75)
    return (round(r * 255), round(g * 255), round(b * 255))


# ------------------------------------------------------------------ geometry

class Geometry:
    """Where everything goes, in pixels. The SVG and the PNG both use it."""

    def __init__(self, layout: TileLayout, shape, title=None):
        self.shape = tuple(shape)
        self.h, self.w, self.prows, self.pcols, self.lead = _arrangement(self.shape)
        self.cells = list(_cells(layout, self.shape))
        widest = max(len(label(t, g)) for _, _, _, t, g in self.cells)
        self.cell_w = widest * ADVANCE + 2 * PAD
        self.cell_h = CELL_H
        self.title_lines = title.splitlines() if title else []
        self.title_h = len(self.title_lines) * (TEXT_H + PAD) + PAD if title else 0
        self.rowlab_w = len(str(self.h - 1)) * ADVANCE + 2 * PAD
        self.collab_h = TEXT_H + 2 * PAD
        self.header_h = HEADER_H if self.lead else 0
        self.panel_w = self.rowlab_w + self.w * self.cell_w
        self.panel_h = self.header_h + self.collab_h + self.h * self.cell_h
        self.width = 2 * MARGIN + self.pcols * self.panel_w + (self.pcols - 1) * PANEL_GAP
        for line in self.title_lines:
            self.width = max(self.width, 2 * MARGIN + len(line) * ADVANCE)
        self.height = 2 * MARGIN + self.title_h + self.prows * self.panel_h + (self.prows - 1) * PANEL_GAP

    def panel_origin(self, prow: int, pcol: int) -> tuple:
        return (MARGIN + pcol * (self.panel_w + PANEL_GAP),
                MARGIN + self.title_h + prow * (self.panel_h + PANEL_GAP))

    def cell_box(self, row: int, col: int) -> tuple:
        """(x, y, w, h) of picture cell (row, col)."""
        prow, r = divmod(row, self.h)
        pcol, c = divmod(col, self.w)
        x0, y0 = self.panel_origin(prow, pcol)
        return (x0 + self.rowlab_w + c * self.cell_w, y0 + self.header_h + self.collab_h + r * self.cell_h,
                self.cell_w, self.cell_h)

    def panels(self):
        """(prow, pcol, header text) of every panel; the header is '' for views without leading dims."""
        for lc in product(*(range(d) for d in self.lead)):
            outer = 0
            for d, c in zip(self.lead[:-1], lc[:-1]):
                outer = outer * d + c
            pc = lc[-1] if self.lead else 0
            head = "[" + ", ".join(map(str, lc)) + ", :, :]" if self.lead else ""
            yield outer, pc, head


def _hex(rgb) -> str:
    return "#%02x%02x%02x" % rgb


# ------------------------------------------------------------------ SVG

def svg(layout: TileLayout, shape, title=None) -> str:
    """The picture as an SVG document (text), with an optional title (one or more lines) above it. Each cell is a
    `<g class="cell">` holding its rect and its `T<thread>R<reg>` label."""
    g = Geometry(layout, shape, title)
    font = f'font-family="monospace" font-size="{TEXT_H}"'
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{g.width}" height="{g.height}" '
           f'viewBox="0 0 {g.width} {g.height}" data-shape="{",".join(map(str, g.shape))}">',
           f'<rect x="0" y="0" width="{g.width}" height="{g.height}" fill="{_hex(BACKGROUND)}"/>']
    for i, line in enumerate(g.title_lines):
        out.append(f'<text class="title" x="{MARGIN}" y="{MARGIN + i * (TEXT_H + PAD) + TEXT_H - 2}" {font} '
                   f'fill="{_hex(INK)}">{escape(line)}</text>')
    for prow, pcol, head in g.panels():
        x0, y0 = g.panel_origin(prow, pcol)
        if head:
            out.append(f'<text class="panel" x="{x0}" y="{y0 + PAD + TEXT_H - 2}" {font} '
                       f'fill="{_hex(INK)}">{escape(head)}</text>')
        ty = y0 + g.header_h + PAD + TEXT_H - 2
        for c in range(g.w):
            cx = x0 + g.rowlab_w + c * g.cell_w + g.cell_w // 2
            out.append(f'<text class="colidx" x="{cx}" y="{ty}" text-anchor="middle" {font} '
                       f'fill="{_hex(DIM_INK)}">{c}</text>')
        for r in range(g.h):
            ry = y0 + g.header_h + g.collab_h + r * g.cell_h + PAD + TEXT_H - 2
            out.append(f'<text class="rowidx" x="{x0 + g.rowlab_w - PAD}" y="{ry}" text-anchor="end" {font} '
                       f'fill="{_hex(DIM_INK)}">{r}</text>')
    for row, col, coord, t, reg in g.cells:
        x, y, w, h = g.cell_box(row, col)
        lab = label(t, reg)
        cs = ",".join(map(str, coord))
        out.append(f'<g class="cell" data-row="{row}" data-col="{col}" data-coord="{cs}" data-thread="{t}" '
                   f'data-reg="{reg}"><title>({cs}): thread {t}, register {reg}</title>'
                   f'<rect x="{x}" y="{y}" width="{w}" height="{h}" fill="{_hex(colour(t))}" '
                   f'stroke="{_hex(GRID)}" stroke-width="1"/>'
                   f'<text x="{x + w // 2}" y="{y + PAD + TEXT_H - 1}" text-anchor="middle" {font} '
                   f'fill="{_hex(INK)}">{lab}</text></g>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------ PNG

# 5x7 glyphs, one string of five '#'/'.' per row. Enough for cell labels, indices and panel headers.
_FONT_ROWS = {
    "0": (".###.", "#...#", "#..##", "#.#.#", "##..#", "#...#", ".###."),
    "1": ("..#..", ".##..", "..#..", "..#..", "..#..", "..#..", ".###."),
    "2": (".###.", "#...#", "....#", "...#.", "..#..", ".#...", "#####"),
    "3": ("####.", "....#", "....#", ".###.", "....#", "....#", "####."),
    "4": ("...#.", "..##.", ".#.#.", "#..#.", "#####", "...#.", "...#."),
    "5": ("#####", "#....", "####.", "....#", "....#", "#...#", ".###."),
    "6": ("..##.", ".#...", "#....", "####.", "#...#", "#...#", ".###."),
    "7": ("#####", "....#", "...#.", "..#..", ".#...", ".#...", ".#..."),
    "8": (".###.", "#...#", "#...#", ".###.", "#...#", "#...#", ".###."),
    "9": (".###.", "#...#", "#...#", ".####", "....#", "...#.", ".##.."),
    "T": ("#####", "..#..", "..#..", "..#..", "..#..", "..#..", "..#.."),
    "R": ("####.", "#...#", "#...#", "####.", "#.#..", "#..#.", "#...#"),
    "[": (".###.", ".#...", ".#...", ".#...", ".#...", ".#...", ".###."),
    "]": (".###.", "...#.", "...#.", "...#.", "...#.", "...#.", ".###."),
    ",": (".....", ".....", ".....", ".....", ".....", "..#..", ".#..."),
    ":": (".....", "..#..", "..#..", ".....", "..#..", "..#..", "....."),
    "-": (".....", ".....", ".....", ".###.", ".....", ".....", "....."),
    " ": (".....",) * 7,
}
FONT = {ch: tuple(tuple(c == "#" for c in row) for row in rows) for ch, rows in _FONT_ROWS.items()}


class _Canvas:
    def __init__(self, w: int, h: int, bg):
        self.w, self.h = w, h
        self.px = bytearray(bytes(bg) * (w * h))

    def rect(self, x, y, w, h, rgb):
        x0, y0, x1, y1 = max(0, x), max(0, y), min(self.w, x + w), min(self.h, y + h)
        if x1 <= x0:
            return
        run = bytes(rgb) * (x1 - x0)
        for yy in range(y0, y1):
            i = (yy * self.w + x0) * 3
            self.px[i:i + len(run)] = run

    def frame(self, x, y, w, h, rgb):
        self.rect(x, y, w, 1, rgb)
        self.rect(x, y + h - 1, w, 1, rgb)
        self.rect(x, y, 1, h, rgb)
        self.rect(x + w - 1, y, 1, h, rgb)

    def text(self, x, y, s, rgb):
        """Draw `s` with its top-left corner at (x, y); characters without a glyph are skipped as blanks."""
        for ch in s:
            glyph = FONT.get(ch)
            if glyph is not None:
                for gy, row in enumerate(glyph):
                    for gx, on in enumerate(row):
                        if on:
                            self.rect(x + gx * SCALE, y + gy * SCALE, SCALE, SCALE, rgb)
            x += ADVANCE

    def png(self) -> bytes:
        stride = self.w * 3
        raw = b"".join(b"\x00" + bytes(self.px[y * stride:(y + 1) * stride]) for y in range(self.h))

        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

        ihdr = struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)     # 8-bit RGB, no interlace
        return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw, 9)) + \
            chunk(b"IEND", b"")


def text_width(s: str) -> int:
    return len(s) * ADVANCE - SCALE


def png(layout: TileLayout, shape, path: str | None = None) -> bytes:
    """The picture as PNG bytes, laid out like `svg(layout, shape)` without a title (the font has no letters);
    also written to `path` when given."""
    g = Geometry(layout, shape, None)
    cv = _Canvas(g.width, g.height, BACKGROUND)
    for prow, pcol, head in g.panels():
        x0, y0 = g.panel_origin(prow, pcol)
        if head:
            cv.text(x0, y0 + PAD, head, INK)
        for c in range(g.w):
            s = str(c)
            cx = x0 + g.rowlab_w + c * g.cell_w + (g.cell_w - text_width(s)) // 2
            cv.text(cx, y0 + g.header_h + PAD, s, DIM_INK)
        for r in range(g.h):
            s = str(r)
            cv.text(x0 + g.rowlab_w - PAD - text_width(s), y0 + g.header_h + g.collab_h + r * g.cell_h + PAD + 1,
                    s, DIM_INK)
    for row, col, _, t, reg in g.cells:
        x, y, w, h = g.cell_box(row, col)
        cv.rect(x, y, w, h, colour(t))
        cv.frame(x, y, w + 1, h + 1, GRID)
        lab = label(t, reg)
        cv.text(x + (w - text_width(lab)) // 2, y + PAD + 1, lab, INK)
    data = cv.png()
    if path is not None:
        with open(path, "wb") as f:
            f.write(data)
    return data


def png_size(layout: TileLayout, shape) -> tuple:
    """(width, height) in pixels of `png(layout, shape)`."""
    g = Geometry(layout, shape, None)
    return g.width, g.height
