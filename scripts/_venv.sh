# Sourced by the entry-point scripts: makes .venv exist and hold the project, idempotently.
# HARNESS_VENV_EXTRA=test (./scripts/test) adds the test extra (torchao, megatron-core, accelerate,
# jsonschema, pre-commit: what the tests of the third-party stacks and formats import); without it
# (./scripts/run, ./scripts/setup) .venv holds what every command of the README imports, no more.
# torch is pinned to 2.13.0 only when absent: that CPU build is on this machine's disk,
# while a bare "torch" requirement would pull a multi-GB CUDA build.
# HARNESS_VENV: another folder for it (default .venv); HARNESS_VENV_SYSTEM_SITE=1 creates it
# with the system's packages visible (a GPU runner's CUDA torch and Transformer Engine).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${HARNESS_VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"
stamp="$VENV/.harness-installed"
extra="${HARNESS_VENV_EXTRA:-}"
if [[ -n "$extra" && "$extra" != test ]]; then
  echo "HARNESS_VENV_EXTRA must be empty or 'test', got '$extra'" >&2
  exit 2
fi
if [[ ! -x "$PY" ]]; then
  if [[ "${HARNESS_VENV_SYSTEM_SITE:-0}" == 1 ]]; then
    python3 -m venv "$VENV"  --system-site-packages
  else
    python3 -m venv "$VENV"
  fi
fi
want="$(sha256sum <"$ROOT/pyproject.toml" | cut -c1-16)"
have="$(cat "$stamp" 2>/dev/null || true)"
# A .venv with the test extra serves ./scripts/run too; one without it is completed by ./scripts/test.
if [[ "$have" != "$want test" && "$have" != "$want $extra" ]]; then
  if ! "$PY" -c "import torch" 2>/dev/null; then
    "$PY" -m pip install -q --disable-pip-version-check "torch==2.13.0"
  fi
  "$PY" -m pip install -q --disable-pip-version-check -e "$ROOT${extra:+[$extra]}"
  echo "$want $extra" > "$stamp"
fi
export PATH="$VENV/bin:$PATH"
