#!/usr/bin/env bash
# Creates tools/.venv with the pinned reference stack (tools/reference/requirements.txt) when it is
# missing or incomplete. Idempotent: a second run only checks that the stack imports.
# Usage: tools/reference/setup_venv.sh        (env PYTHON=python3.11 to pick the interpreter)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="$root/tools/.venv"
req="$here/requirements.txt"
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$req" | cut -d' ' -f1)"

if [[ ! -x "$venv/bin/python" ]]; then
  echo "[setup_venv] creating $venv"
  "${PYTHON:-python3}" -m venv "$venv"
fi
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  if ! "$venv/bin/python" - "$req" <<'PY'
import sys, importlib.metadata as md
ok = True
for line in open(sys.argv[1]):
    line = line.split('#', 1)[0].strip()
    if not line or '==' not in line:
        continue
    name, ver = line.split('==')
    try:
        have = md.version(name)
    except md.PackageNotFoundError:
        have = None
    if have is None or have.split('+')[0] != ver:
        ok = False
sys.exit(0 if ok else 1)
PY
  then
    echo "[setup_venv] installing $req"
    "$venv/bin/python" -m pip install --upgrade pip >/dev/null
    "$venv/bin/python" -m pip install -r "$req"
  fi
  echo "$want" > "$stamp"
fi
"$venv/bin/python" -c "import torch, diffusers, transformers, safetensors, sentencepiece, tokenizers; \
print('[setup_venv] ok: torch', torch.__version__, 'diffusers', diffusers.__version__, 'transformers', transformers.__version__)"
