"""Cache folders and entries that are not what they should be (issue 14): a TILEDSL_CACHE_DIR or TILEDSL_DUMP_DIR
that is a file compiles without them (one warning); an entry whose JSON and hashes are valid but whose fields are
wrong is discarded and recompiled; dangling links and unreadable folders inside the cache never make
`python -m tiledsl cache info/clear` raise. Each failed before (FileExistsError, KeyError, FileNotFoundError)."""
import hashlib
import json
import os
import warnings

import numpy as np
import pytest

import tiledsl
from tiledsl import T
from tiledsl.__main__ import main
from tiledsl.cache import disk as cache


def k(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = A[1] + 3.0


def compile_fresh():
    return tiledsl.jit(k).compile(np.zeros(4, np.float32), target="sm_80")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "c"
    monkeypatch.setenv("TILEDSL_CACHE_DIR", str(d))
    return d


def test_cache_dir_that_is_a_file_compiles_without_a_cache_and_warns_once(tmp_path, monkeypatch, capsys):
    f = tmp_path / "not-a-folder"
    f.write_text("x")
    for path in (f, f / "below"):
        monkeypatch.setenv("TILEDSL_CACHE_DIR", str(path))
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            ck1 = compile_fresh()
            ck2 = compile_fresh()
        msgs = [str(x.message) for x in w if "disk cache" in str(x.message)]
        assert len(msgs) == 1 and "is not a directory" in msgs[0] and "without a disk cache" in msgs[0], msgs
        assert ck1.asm["ptx"] == ck2.asm["ptx"] and not getattr(ck2, "from_disk", False)
        assert main(["cache", "info"]) == 0
        assert "unusable" in capsys.readouterr().out
        assert main(["cache", "clear"]) == 1
        assert "nothing to clear" in capsys.readouterr().out
    assert f.read_text() == "x"


def test_dump_dir_that_is_a_file_warns_and_compiles(tmp_path, monkeypatch, cache_dir):
    f = tmp_path / "dump-file"
    f.write_text("x")
    monkeypatch.setenv("TILEDSL_DUMP_DIR", str(f))
    with pytest.warns(UserWarning, match="TILEDSL_DUMP_DIR=.* cannot hold the dumps \\(not a directory\\)"):
        ck = compile_fresh()
    assert ".target sm_80" in ck.asm["ptx"] and f.read_text() == "x"
    monkeypatch.setenv("TILEDSL_DUMP_DIR", str(tmp_path / "dumps"))          # a good one still dumps
    tiledsl.jit(k).compile(np.zeros(4, np.float32), target="sm_86")
    assert (tmp_path / "dumps" / "k.ptx").exists()


def rewrite(entry_dir, edit_meta=None, edit_asm=None):
    """Change an entry's contents and re-record the hashes, so that only its fields are wrong."""
    meta_path = os.path.join(entry_dir, "meta.json")
    with open(meta_path) as f:
        meta = json.load(f)
    if edit_asm is not None:
        with open(os.path.join(entry_dir, "asm.json")) as f:
            asm = json.load(f)
        data = json.dumps(edit_asm(asm)).encode()
        with open(os.path.join(entry_dir, "asm.json"), "wb") as f:
            f.write(data)
        meta["files"]["asm.json"] = hashlib.sha256(data).hexdigest()
    if edit_meta is not None:
        meta = edit_meta(meta)
    with open(meta_path, "w") as f:
        json.dump(meta, f)


def _drop(key):
    def f(m):
        del m[key]
        return m
    return f


def _set(key, value):
    def f(m):
        m[key] = value
        return m
    return f


def _sig(edit):
    def f(m):
        edit(m["signature"])
        return m
    return f


BAD_FIELDS = [
    ("no name", _drop("name"), None),
    ("no signature", _drop("signature"), None),
    ("no metadata", _drop("metadata"), None),
    ("sm is a string", _set("sm", "90"), None),
    ("metadata is a list", _set("metadata", []), None),
    ("dynamic_shared is text", lambda m: {**m, "metadata": {"dynamic_shared": "big"}}, None),
    ("signature params missing", _sig(lambda s: s.pop("params")), None),
    ("signature param of 3 fields", _sig(lambda s: s.__setitem__("params", [["A", "tensor", "float32"]])), None),
    ("signature dtype unknown", _sig(lambda s: s["params"][0].__setitem__(2, "float128")), None),
    ("signature kind unknown", _sig(lambda s: s["params"][0].__setitem__(1, "pointer")), None),
    ("signature block of 2", _sig(lambda s: s.__setitem__("block", [1, 1])), None),
    ("signature block negative", _sig(lambda s: s.__setitem__("block", [-1, 1, 1])), None),
    ("signature is a list", _set("signature", [1, 2]), None),
    ("signature of another kernel", _sig(lambda s: s["params"][0].__setitem__(0, "B")), None),
    ("asm is a list", None, lambda a: ["ptx"]),
    ("asm without ptx", None, lambda a: {"tile": a["tile"]}),
    ("asm with a number", None, lambda a: {**a, "ptx": 5}),
    ("file list not a dict", _set("files", ["asm.json"]), None),
    ("file name escapes the entry", lambda m: {**m, "files": {"../x": "0"}}, None),
]


@pytest.mark.parametrize("name,edit_meta,edit_asm", BAD_FIELDS, ids=[b[0] for b in BAD_FIELDS])
def test_entry_with_wrong_fields_is_discarded_and_recompiled(name, edit_meta, edit_asm, cache_dir):
    good = compile_fresh()
    (d,) = [e[0] for e in cache.entries()]
    rewrite(d, edit_meta, edit_asm)
    with pytest.warns(UserWarning, match="discarding damaged cache entry"):
        ck = compile_fresh()
    assert not getattr(ck, "from_disk", False) and ck.asm["ptx"] == good.asm["ptx"]
    again = compile_fresh()                       # the recompiled entry is whole again
    assert getattr(again, "from_disk", False) and again.signature == good.signature


def test_dangling_links_and_stray_files_in_the_cache(cache_dir, capsys):
    compile_fresh()
    (d,) = [e[0] for e in cache.entries()]
    os.symlink("/nonexistent/meta", os.path.join(d, "extra.json"))          # inside an entry
    sub = os.path.dirname(d)
    os.symlink("/nonexistent/entry", os.path.join(sub, "ffdangling"))        # an entry that is a dangling link
    os.symlink("/nonexistent/sub", os.path.join(str(cache_dir), "zz"))      # a two-letter folder that is a link
    (cache_dir / "README").write_text("stray file")
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert "entries: 2" in out
    assert main(["cache", "clear"]) == 0
    assert "removed 2 entries" in capsys.readouterr().out
    assert cache.entries() == [] and not os.path.lexists(os.path.join(sub, "ffdangling"))
    assert main(["cache", "info", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["entries"] == 0


def test_unreadable_folders_in_the_cache(cache_dir, capsys, monkeypatch):
    compile_fresh()
    real = os.listdir

    def listdir(p):
        if os.path.dirname(str(p)) == str(cache_dir):        # a two-letter folder that cannot be listed
            raise PermissionError(13, "Permission denied", str(p))
        return real(p)
    monkeypatch.setattr(os, "listdir", listdir)
    assert main(["cache", "info"]) == 0
    assert "entries: 0" in capsys.readouterr().out
    assert main(["cache", "clear"]) == 0
