#!/usr/bin/env bash
# What a device call (the H200 machine) runs first: install the wheels carried in .whl/
# (libcst, which the image lacks; pyyaml, its one dependency, is on the image) into
# /tmp/site, and make every later python3 of this machine see them.
#
#   bash bench/device_setup.sh && python3 bench/run.py ...     (a .pth file makes /tmp/site visible)
#   source bench/device_setup.sh                                (also exports PYTHONPATH)
#
# Prepare the wheels here first (see bench/README.md), and name ".whl" in the call's carry.
set -u
SITE=/tmp/site
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WHEELS="$ROOT/.whl"
PY="${PYTHON:-python3}"

if ! ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    echo "device_setup: no wheels in $WHEELS (carry .whl)" >&2
    return 1 2>/dev/null || exit 1
fi
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$WHEELS"/*.whl \
    || { echo "device_setup: pip install failed" >&2; return 1 2>/dev/null || exit 1; }
# A .pth in the interpreter's site-packages: processes started later (bench/run.py, its
# workers) find /tmp/site without PYTHONPATH. The machine is bare and given back after.
PURELIB="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$SITE" > "$PURELIB/kernelopt-device-site.pth" 2>/dev/null \
    || echo "device_setup: cannot write $PURELIB; export PYTHONPATH=$SITE" >&2
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
# The image ships torch and triton without bytecode, and the sandbox's children may not write
# any (PYTHONDONTWRITEBYTECODE=1), so every job compiled torch's Python source again: on the
# H200 of 2026-11-30 `import torch, triton` took 4.2-4.7 s with no torch/__pycache__, about a
# third of a verify job. Compile it once here, before any child starts.
PKGS="$("$PY" -c 'import importlib.util as u, os; print(" ".join(os.path.dirname(u.find_spec(n).origin) for n in ("torch", "triton")))')"
T0=$(date +%s)
# as a command, not a stdin script: compileall's worker processes re-import their __main__
"$PY" -m compileall -qq -j 0 $PKGS >/dev/null 2>&1 \
    || echo "device_setup: some torch/triton files did not compile (jobs import them from source)" >&2
echo "device_setup: torch and triton bytecode compiled in $(( $(date +%s) - T0 )) s"
"$PY" - <<'PY' || { echo "device_setup: a package does not import" >&2; return 1 2>/dev/null || exit 1; }
import libcst, numpy, torch, triton
gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no gpu"
print(f"device_setup: libcst {libcst.__version__ if hasattr(libcst, '__version__') else '?'}, "
      f"torch {torch.__version__}, triton {triton.__version__}, numpy {numpy.__version__}, {gpu} "
      f"x{torch.cuda.device_count()}")
PY
