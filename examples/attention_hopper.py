"""The FA3-style FlashAttention forward (tiledsl/ops/flash/fa3.py: TMA, wgmma, producer/consumer warpgroups, ping-pong,
the lazy rescale, a persistent grid), run once: examples/attention.py's run on path="fa3".

    python examples/attention_hopper.py [--n 4096] [--d 128] [--causal]   # sm_90 GPU: against SDPA; else: a small
                                                                          # case on the interpreter
"""
import sys

from attention import main as attention_main     # examples/attention.py, beside this script


def main(argv=None):
    return attention_main(argv, path="fa3")


if __name__ == "__main__":
    sys.exit(main())
