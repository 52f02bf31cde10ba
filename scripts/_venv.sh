# Sourced by the entry-point scripts: makes .venv exist and hold the project, idempotently.
# torch is pinned to 2.13.0 only when absent: that CPU build is on this machine's disk,
# while a bare "torch" requirement would pull a multi-GB CUDA build.
# HARNESS_VENV: another folder for it (default .venv); HARNESS_VENV_SYSTEM_SITE=1 creates it
# with the system's packages visible (a GPU runner's CUDA torch and Transformer Engine).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${HARNESS_VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"
stamp="$VENV/.harness-installed"
if [[ ! -x "$PY" ]]; then
  if [[ "${HARNESS_VENV_SYSTEM_SITE:-0}" == 1 ]]; then
    python3 -m venv --system-site-packages "$VENV"
  else
    python3 -m venv "$VENV"
  fi
fi
want="$(cat "$ROOT/pyproject.toml" | sha256sum | cut -c1-16)"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  if ! "$PY" -c "import torch" 2>/dev/null; then
    "$PY" -m pip install -q --disable-pip-version-check "torch==2.13.0"
  fi
  "$PY" -m pip install -q --disable-pip-version-check -e "$ROOT[test]"
  echo "$want" > "$stamp"
fi
export PATH="$VENV/bin:$PATH"
