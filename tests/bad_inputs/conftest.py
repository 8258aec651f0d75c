import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
for p in (TESTS, HERE):
    if p not in sys.path:
        sys.path.insert(0, p)
