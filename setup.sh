#!/usr/bin/env bash
# The course's one set-up command, from the repository root of a fresh clone:
#
#     ./setup.sh            # .venv with the package, the course and its tests (the `dev` extra)
#     ./setup.sh triton     # the same plus other extras by name (here: Triton, to run its
#                           # kernel interpreted on a CPU, as CI does)
#
# System packages first (Debian/Ubuntu): sudo apt-get install python3-venv g++ chromium redis-server
#
# torch's build is chosen for this machine: pip's default torch is kept where it needs no CUDA
# libraries (macOS, or a CPU-only wheel pip already prefers) or where an NVIDIA GPU is present
# (the CUDA build, which brings triton with it); otherwise, on Linux without an NVIDIA GPU, the
# CPU-only build comes from PyTorch's CPU index (one ~190 MB wheel instead of ~3 GB of CUDA ones).
# pip's own settings apply throughout (PIP_CONSTRAINT, PIP_INDEX_URL, pip.conf). Re-running it
# updates the same .venv.
set -euo pipefail
cd "$(dirname "$0")"

python=${PYTHON:-python3}
extras=dev
for extra in "$@"; do extras="$extras,$extra"; done

if ! "$python" -c 'import sys, ensurepip, venv; sys.exit(sys.version_info < (3, 10))'; then
  echo "setup.sh needs Python >= 3.10 with venv and ensurepip (Debian/Ubuntu: apt-get install" \
    "python3-venv), as \$PYTHON or python3." >&2
  exit 1
fi
command -v g++ >/dev/null ||
  echo "note: no g++, so the C++ CPU attention kernel cannot build and the slower torch" \
    "reference stands in (Debian/Ubuntu: apt-get install g++)." >&2

"$python" -m venv .venv
pip=(.venv/bin/python -m pip)
"${pip[@]}" install --upgrade pip # --dry-run --report need pip >= 22.2

# Which torch would pip install here, and does it need CUDA's libraries?
pip_torch_needs_cuda() {
  "${pip[@]}" install --dry-run --no-deps --quiet --report - "torch>=2.5" |
    .venv/bin/python -c '
import json, sys
wheel = json.load(sys.stdin)["install"][0]["metadata"]
sys.exit(not any(r.startswith("nvidia-") for r in wheel.get("requires_dist") or []))'
}
if nvidia-smi -L >/dev/null 2>&1; then
  echo "setup.sh: an NVIDIA GPU is present: pip's default (CUDA) torch"
elif pip_torch_needs_cuda; then
  echo "setup.sh: no NVIDIA GPU: the CPU-only torch from PyTorch's CPU index"
  "${pip[@]}" install "torch>=2.5" --index-url https://download.pytorch.org/whl/cpu
fi
"${pip[@]}" install -e ".[$extras]"
.venv/bin/python -c "import torch; print('setup.sh: torch', torch.__version__, '| CUDA:', \
torch.version.cuda or 'none', '| next: .venv/bin/pytest -m quick, then .venv/bin/jupyter lab')"
