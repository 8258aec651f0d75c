"""A TiledslError's traceback shows the user's frames only: the message names the kernel's line, and the frames of
tiledsl under the call are hidden unless TILEDSL_DEBUG_TRACEBACK=1 (issue 34)."""
import os
import subprocess
import sys
import textwrap
import traceback

import numpy as np
import pytest

import tiledsl
from tiledsl import T

PACKAGE = os.path.dirname(os.path.abspath(tiledsl.__file__)) + os.sep
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.abspath(__file__)


def k_unknown(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = undefined_name + 1  # noqa: F821


def internal_frames(e):
    return [f for f in traceback.extract_tb(e.__traceback__) if f.filename.startswith(PACKAGE)]


def call_line(fn, needle):
    import inspect
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, text in enumerate(lines) if needle in text)


@pytest.fixture(autouse=True)
def _switch_off(monkeypatch):
    monkeypatch.delenv("TILEDSL_DEBUG_TRACEBACK", raising=False)


def compile_it(kernel):
    kernel.compile(np.zeros(4, np.float32), target="sm_90")            # the user's line


def test_compile_error_has_no_tiledsl_frame():
    with pytest.raises(tiledsl.CompilationError) as ei:
        compile_it(tiledsl.jit(k_unknown))
    e = ei.value
    assert internal_frames(e) == []
    text = "".join(traceback.format_exception(e))
    assert PACKAGE not in text
    assert f'File "{HERE}", line {call_line(compile_it, "the user")}, in compile_it' in text
    # the message names the kernel's own line
    assert f"{HERE}:{call_line(k_unknown, 'undefined_name')}:" in str(e) and "undefined_name" in text


def test_launch_errors_have_no_tiledsl_frame():
    kernel = tiledsl.jit(k_unknown, interpret=True)
    with pytest.raises(tiledsl.LaunchError) as ei:
        kernel[[1], [1]]
    assert internal_frames(ei.value) == [] and "tuple" in str(ei.value)
    with pytest.raises(tiledsl.LaunchError) as ei:
        kernel.compile(np.zeros(5, np.float32), target="sm_90")           # wrong shape
    assert internal_frames(ei.value) == [] and "argument 'A'" in str(ei.value)
    with pytest.raises(tiledsl.CompilationError) as ei:
        kernel(np.zeros(4, np.float32))                                   # the interpreter's path
    assert internal_frames(ei.value) == []
    with pytest.raises(tiledsl.TiledslError) as ei:
        tiledsl.jit(k_unknown, no_such_option=1)
    assert internal_frames(ei.value) == []


def test_debug_switch_keeps_every_frame(monkeypatch):
    monkeypatch.setenv("TILEDSL_DEBUG_TRACEBACK", "1")
    with pytest.raises(tiledsl.CompilationError) as ei:
        compile_it(tiledsl.jit(k_unknown))
    assert any(f.filename.endswith(os.path.join("frontend", "parser.py")) for f in internal_frames(ei.value))


def test_uncaught_error_printed_by_python(tmp_path):
    script = tmp_path / "user_kernel.py"
    script.write_text(textwrap.dedent("""\
        import numpy as np
        import tiledsl
        from tiledsl import T

        @tiledsl.jit
        def k(A: T.Tensor((4,), "float32")):
            A[0] = undefined_name + 1

        k.compile(np.zeros(4, np.float32), target="sm_90")
        """))
    env = dict(os.environ, PYTHONPATH=ROOT, TILEDSL_DISABLE_DISK_CACHE="1")
    env.pop("TILEDSL_DEBUG_TRACEBACK", None)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 1
    assert PACKAGE not in r.stderr, r.stderr
    assert f'File "{script}", line 9, in <module>' in r.stderr
    assert f"CompilationError: {script}:7:12: error: name 'undefined_name' is not defined" in r.stderr
