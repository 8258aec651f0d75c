"""Layout pictures: the committed seed pictures (docs/layouts) show exactly the seed page's lane maps."""
import importlib.util
import os
import struct
import xml.etree.ElementTree as ET
import zlib

import pytest

from tiledsl.tools import pictures
from tiledsl.layout import S, LayoutError, TileLayout, laneid, warpid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs", "layouts")
SVG_NS = "{http://www.w3.org/2000/svg}"


def _make_module():
    spec = importlib.util.spec_from_file_location("layouts_make", os.path.join(DOCS, "make.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# The seed page's maps: lane l, native register r -> atom coordinate (row, col), per K16 half for A and B.
def seed_a(l, r):
    return l // 4 + 8 * (r % 2), l % 4 + 4 * (r // 2)


def seed_b(l, r):
    return l // 4, l % 4 + 4 * r


def seed_d(l, r):
    return l // 4 + 8 * (r // 2), 2 * (l % 4) + r % 2


def expected(name):
    """View coordinate -> (lane, register) from the seed page. Register slots count across K halves."""
    out = {}
    if name == "A":
        for kk in range(2):
            for l in range(32):
                for r in range(4):
                    out[(0, kk) + seed_a(l, r)] = (l, 4 * kk + r)
    elif name == "B":
        for kk in range(2):
            for l in range(32):
                for r in range(2):
                    out[(0, kk) + seed_b(l, r)] = (l, 2 * kk + r)
    else:
        for l in range(32):
            for r in range(4):
                out[(0, 0) + seed_d(l, r)] = (l, r)
    return out


SHAPES = {"A": (1, 2, 16, 8), "B": (1, 2, 8, 8), "D": (1, 1, 16, 8)}


def parse_svg(path):
    root = ET.parse(path).getroot()
    cells = []
    for g in root.iter(SVG_NS + "g"):
        if g.get("class") != "cell":
            continue
        rect = g.find(SVG_NS + "rect")
        text = g.find(SVG_NS + "text")
        cells.append({"row": int(g.get("data-row")), "col": int(g.get("data-col")),
                      "coord": tuple(int(x) for x in g.get("data-coord").split(",")),
                      "label": text.text, "x": float(rect.get("x")), "y": float(rect.get("y")),
                      "fill": rect.get("fill"), "thread": int(g.get("data-thread")), "reg": int(g.get("data-reg"))})
    return root, cells


@pytest.mark.parametrize("name", ["A", "B", "D"])
def test_committed_svg_matches_seed_lane_maps(name):
    root, cells = parse_svg(os.path.join(DOCS, f"seed_{name}.svg"))
    want = expected(name)
    shape = SHAPES[name]
    assert root.get("data-shape") == ",".join(map(str, shape))
    n = 1
    for d in shape:
        n *= d
    assert len(want) == n, "the seed map must cover the whole view"     # the map itself is a bijection
    assert len(cells) == n
    seen = set()
    for c in cells:
        coord = c["coord"]
        assert coord not in seen
        seen.add(coord)
        lane, reg = want[coord]
        assert c["label"] == f"T{lane}R{reg}", f"seed_{name} cell {coord}"
        assert (c["thread"], c["reg"]) == (lane, reg)
        # Leading dims: the K half runs left to right, so the picture cell is (row, kk * W + col).
        assert (c["row"], c["col"]) == (coord[2], coord[1] * shape[3] + coord[3])
        assert c["fill"] == "#%02x%02x%02x" % pictures.colour(lane)
    assert seen == set(want)
    # The drawn positions follow the grid: one x per picture column, one y per picture row, both increasing.
    xs, ys = {}, {}
    for c in cells:
        assert xs.setdefault(c["col"], c["x"]) == c["x"]
        assert ys.setdefault(c["row"], c["y"]) == c["y"]
    assert [xs[k] for k in sorted(xs)] == sorted(xs.values())
    assert [ys[k] for k in sorted(ys)] == sorted(ys.values())


def read_png(data):
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, []
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        (crc,) = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
        assert zlib.crc32(kind + body) == crc, f"bad CRC in {kind}"
        chunks.append((kind, body))
        pos += 12 + n
    assert chunks[0][0] == b"IHDR" and chunks[-1][0] == b"IEND"
    w, h, depth, ctype, comp, filt, inter = struct.unpack(">IIBBBBB", chunks[0][1])
    assert (depth, ctype, comp, filt, inter) == (8, 2, 0, 0, 0)
    raw = zlib.decompress(b"".join(b for k, b in chunks if k == b"IDAT"))
    assert len(raw) == h * (1 + 3 * w)
    rows = [raw[y * (1 + 3 * w):(y + 1) * (1 + 3 * w)] for y in range(h)]
    assert all(r[0] == 0 for r in rows)                      # filter type 0: the pixels are the bytes

    def pixel(x, y):
        return tuple(rows[y][1 + 3 * x:4 + 3 * x])
    return w, h, pixel, raw


@pytest.mark.parametrize("name", ["A", "B", "D"])
def test_committed_png_is_valid_and_coloured_by_lane(name):
    make = _make_module()
    layout, shape, _ = make.SEED[name]
    with open(os.path.join(DOCS, f"seed_{name}.png"), "rb") as f:
        data = f.read()
    w, h, pixel, raw = read_png(data)
    assert (w, h) == pictures.png_size(layout, shape)
    geo = pictures.Geometry(layout, shape)
    cols = shape[1] * shape[3]                                 # the K halves side by side
    assert geo.width >= cols * geo.cell_w and geo.height >= shape[2] * geo.cell_h
    for coord, (lane, _) in expected(name).items():
        x, y, _, _ = geo.cell_box(coord[2], coord[1] * shape[3] + coord[3])
        assert pixel(x + 2, y + 2) == pictures.colour(lane), f"seed_{name} cell {coord}"
    # Compare pixels, not bytes: another zlib may compress the same image differently.
    assert raw == read_png(pictures.png(layout, shape))[3], \
        "docs/layouts is stale: run python docs/layouts/make.py"


def test_committed_svgs_are_current():
    make = _make_module()
    for name in SHAPES:
        layout, shape, title = make.SEED[name]
        with open(os.path.join(DOCS, f"seed_{name}.svg")) as f:
            assert f.read() == pictures.svg(layout, shape, title=make.title_of(name)), \
                "docs/layouts is stale: run python docs/layouts/make.py"


def test_ownership_grid_and_methods():
    ld = TileLayout(S[(1, 1, 2, 8, 4, 2) : (4, 4, 2, 4 @ laneid, 1 @ laneid, 1)])
    grid = pictures.ownership_grid(ld, (1, 1, 16, 8))
    assert len(grid) == 128
    for l in range(32):
        for r in range(4):
            assert grid[seed_d(l, r)] == (l, r)
    svg = pictures.svg(ld, (1, 1, 16, 8), title="D <&>")
    assert svg.startswith("<svg") and "D &lt;&amp;&gt;" in svg
    ET.fromstring(svg)
    for l in range(32):
        for r in range(4):
            own = ld.owner((0, 0) + seed_d(l, r), (1, 1, 16, 8))
            assert (own.lane, own.warp, own.slot, own.thread) == (l, 0, r, l)


def test_arrangement_of_other_ranks(tmp_path):
    row = TileLayout(S[(8,) : (1 @ laneid,)])
    assert pictures.ownership_grid(row, (8,)) == {(0, c): (c, 0) for c in range(8)}
    # 3 leading dims: the last runs across, the others stack down.
    lay = TileLayout(S[(2, 3, 2, 2) : (12, 4, 2, 1)])
    g = pictures.ownership_grid(lay, (2, 3, 2, 2))
    assert len(g) == 24 and g[(0, 0)] == (0, 0) and g[(0, 2)] == (0, 4) and g[(2, 0)] == (0, 12)
    assert g[(3, 5)] == (0, 23)
    # warps count as 32 threads
    w = TileLayout(S[(2, 4) : (1 @ warpid, 1 @ laneid)])
    assert pictures.ownership_grid(w, (2, 4))[(1, 3)] == (35, 0)
    path = tmp_path / "w.png"
    pictures.png(w, (2, 4), str(path))
    assert read_png(path.read_bytes())[:2] == pictures.png_size(w, (2, 4))


def test_refuses_bad_views():
    lay = TileLayout(S[(512, 512) : (512, 1)])
    with pytest.raises(LayoutError):
        pictures.svg(lay, (512, 512))
    with pytest.raises(LayoutError):
        pictures.ownership_grid(TileLayout(S[(4, 4) : (4, 1)]), (8, 2))


def test_layout_methods_draw_the_functions_pictures(tmp_path):
    """TileLayout.to_svg / to_png (the README's spelling) are the pictures module's drawings."""
    lay = TileLayout(S[(8, 4, 2) : (4 @ laneid, 1 @ laneid, 1)])
    assert lay.to_svg((8, 8), "t") == pictures.svg(lay, (8, 8), "t")
    path = tmp_path / "x.png"
    assert lay.to_png((8, 8), str(path)) == pictures.png(lay, (8, 8)) == path.read_bytes()
    assert issubclass(LayoutError, ValueError) and issubclass(LayoutError, __import__("tiledsl").TiledslError)
