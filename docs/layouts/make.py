"""Draw the seed mma page's three register layouts (examples/seed_mma.py: la, lb, ld) as SVG and PNG.

    python docs/layouts/make.py            # writes seed_A/B/D.{svg,png} beside this script

Each cell is one element of the view, labelled T<lane>R<register>; leading view dimensions become panels
(see tiledsl/tools/pictures.py). tests/test_pictures.py checks the committed files against the seed page's lane maps.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [ROOT, os.path.join(ROOT, "examples")]

from tiledsl.tools import pictures  # noqa: E402
from seed_mma import la, lb, ld  # noqa: E402

SEED = {
    "A": (la, (1, 2, 16, 8), "A: (1, 2, 16, 8) uint32, packed f16 pairs; one panel per K16 half"),
    "B": (lb, (1, 2, 8, 8), "B: (1, 2, 8, 8) uint32, packed f16 pairs; one panel per K16 half"),
    "D": (ld, (1, 1, 16, 8), "D: (1, 1, 16, 8) float32 accumulator"),
}


def title_of(name):
    layout, _, what = SEED[name]
    return f"{what}\n{layout!r}"


def main(out_dir=HERE):
    for name, (layout, shape, _) in SEED.items():
        base = os.path.join(out_dir, f"seed_{name}")
        with open(base + ".svg", "w") as f:
            f.write(pictures.svg(layout, shape, title=title_of(name)))
        pictures.png(layout, shape, base + ".png")
        print(f"wrote {os.path.relpath(base)}.svg and .png")


if __name__ == "__main__":
    main(*sys.argv[1:])
