"""Write the SASS of one GEMM configuration (for reading its main loop): python benchmarks/sass_dump.py OUT CFG..."""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
from tiledsl.ops.gemm.mma import make_gemm  # noqa: E402


def main(out, *cfg):
    cfg = tuple(int(x) for x in cfg)
    a = np.zeros((4096, 4096), np.float16)
    ck = make_gemm("float16", "float16", cfg, (4096, 4096, 4096)).compile(a, a, a, target="sm_90")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(ck.cubin)
        f.flush()
        sass = subprocess.run(["cuobjdump", "-sass", f.name], capture_output=True, text=True).stdout
    with open(out, "w") as f:
        f.write(sass)
    print(f"{cfg}: {ck.metadata}; {len(sass.splitlines())} SASS lines -> {out}")


USAGE = """usage: python benchmarks/sass_dump.py OUT BM BN BK WM WN STAGES [PIPE [SPREAD [UNROLL [BULK]]]]
  OUT       the file the SASS is written to
  BM ...    the GEMM configuration (ints), as tiledsl.ops.make_gemm(config=...) takes it
  needs ptxas (for the cubin) and cuobjdump on PATH"""


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] in (["-h"], ["--help"]):
        print(USAGE)
        sys.exit(0)
    if len(args) < 7 or not all(x.isdigit() for x in args[1:]):
        print(USAGE, file=sys.stderr)
        sys.exit(2)
    main(*args)
