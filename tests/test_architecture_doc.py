"""docs/architecture.md names every folder of the package and every instruction family (it is the map)."""
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "architecture.md").read_text()


def test_every_folder_and_family_is_on_the_map():
    pkg = ROOT / "tiledsl"
    folders = [p.name for p in pkg.iterdir() if p.is_dir() and (p / "__init__.py").exists()]
    assert folders and all(f"`{f}/`" in DOC for f in folders), [f for f in folders if f"`{f}/`" not in DOC]
    from tiledsl.isa.registry import FAMILIES
    assert (pkg / "isa" / "bulk").is_dir() and "isa/bulk/" in DOC
    for fam in FAMILIES:
        assert (pkg / "isa" / fam.name / "pattern.py").exists() and (pkg / "isa" / fam.name / "semantics.py").exists()
