"""Install the book's Jupyter kernel into this Python's environment (run by `make venv`).

The kernel, named helpers.repro.numerics.KERNEL_NAME, runs this interpreter with the pinned
numerics of helpers.repro.numerics.PIN (and PYTHONHASHSEED=0) in its environment. JupyterLab,
nbval and tools/build/execute_notebooks.py all start it by that name, which every notebook's
metadata names. It goes into sys.prefix/share/jupyter/kernels, so it exists only for the
Jupyter of this environment (.venv), never for the user's other Pythons.

    python -m tools.build.install_kernel          # install (or overwrite)
    python -m tools.build.install_kernel --check  # exit 1 unless the installed kernel holds the pin
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tools.common import pin

KERNEL_NAME = pin.KERNEL_NAME
KERNEL_ENV = pin.PIN


def kernel_dir() -> Path:
    return Path(sys.prefix) / "share" / "jupyter" / "kernels" / KERNEL_NAME


def install() -> Path:
    import ipykernel.kernelspec

    path = ipykernel.kernelspec.install(
        kernel_name=KERNEL_NAME,
        display_name=pin.KERNEL_DISPLAY_NAME,
        prefix=sys.prefix,
        env=KERNEL_ENV,
    )
    spec = json.loads((Path(path) / "kernel.json").read_text())
    spec["argv"][0] = sys.executable  # this environment's python, whatever is on PATH
    (Path(path) / "kernel.json").write_text(json.dumps(spec, indent=1) + "\n")
    return Path(path)


def problems() -> list[str]:
    spec_file = kernel_dir() / "kernel.json"
    if not spec_file.exists():
        return [f"{spec_file} is missing: run `make venv`"]
    spec = json.loads(spec_file.read_text())
    env = spec.get("env", {})
    out = [f"{k}={env.get(k)!r}, not {v!r}" for k, v in KERNEL_ENV.items() if env.get(k) != v]
    if Path(spec["argv"][0]).resolve() != Path(sys.executable).resolve():
        out.append(f"the kernel runs {spec['argv'][0]}, not {sys.executable}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check the installed kernel")
    args = parser.parse_args()
    if args.check:
        found = problems()
        for p in found:
            print(f"kernel {KERNEL_NAME}: {p}")
        if not found:
            print(f"kernel {KERNEL_NAME}: installed, pin {KERNEL_ENV}")
        return 1 if found else 0
    path = install()
    print(f"installed the Jupyter kernel {KERNEL_NAME!r} in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
