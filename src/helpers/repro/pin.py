"""The book's pinned numerics as plain data, importable without torch.

The values must be in the environment before torch starts, so they live in the book's
Jupyter kernel (tools/build/install_kernel.py) and in the Makefile's test commands, which read
them from here: `python src/helpers/repro/pin.py pinned` prints `NAME=value ...` for `env`.
See helpers.repro.numerics for why each is set.
"""

KERNEL_NAME = "transformer-book"
KERNEL_DISPLAY_NAME = "Transformer book (pinned numerics)"

# Threads: the order of a float sum depends on how it is split across threads, and MKL's
# reproducible mode needs a fixed count. PYTHONHASHSEED fixes set iteration order.
PIN = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "COMPATIBLE",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "PYTHONHASHSEED": "0",
}

# `make test-portable`: the pin deliberately broken, as on a CPU where it cannot hold. The
# scalar ATen kernels change every seeded random tensor; MKL's default path changes every
# matmul; oneDNN may use any instruction set.
BROKEN_PIN = {
    **PIN,
    "ATEN_CPU_CAPABILITY": "default",
    "MKL_CBWR": "AUTO",
    "ONEDNN_MAX_CPU_ISA": "ALL",
}

MODES = {"pinned": PIN, "broken": BROKEN_PIN}

# The variables that choose kernels (the rest of PIN only fixes threads and hashing): an
# unpinned process is this environment without them.
PIN_VARS = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA")

if __name__ == "__main__":
    import sys

    mode = sys.argv[1] if len(sys.argv) > 1 else "pinned"
    if mode not in MODES:
        sys.exit(f"usage: python pin.py [{'|'.join(MODES)}]")
    print(" ".join(f"{k}={v}" for k, v in MODES[mode].items()))
