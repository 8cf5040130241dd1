#!/usr/bin/env bash
# Style checks of the whole tree: clang-format (.clang-format) over the C++/CUDA
# sources, ruff (ruff.toml) over the Python. Fails on the first finding; fix with
#   git ls-files '*.cc' '*.h' '*.cu' | xargs clang-format -i
#   ruff check --fix .
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$HVL_ROOT"
git ls-files '*.cc' '*.h' '*.cu' | xargs clang-format --dry-run --Werror
RUFF="$HVL_VENV/bin/ruff"
[ -x "$RUFF" ] || RUFF=ruff
"$RUFF" check --quiet .
echo "lint: clang-format and ruff clean"
