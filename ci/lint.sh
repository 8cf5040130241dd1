#!/usr/bin/env bash
# Style checks of the whole tree: clang-format (.clang-format) over the C++/CUDA
# sources, ruff (ruff.toml) over the Python, and ci/check_doc_refs.py over the
# references to docs/. Fails on the first finding; fix with
#   git ls-files '*.cc' '*.h' '*.cu' | xargs clang-format -i
#   ruff check --fix .
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$HVL_ROOT"
git ls-files '*.cc' '*.h' '*.cu' | xargs clang-format --dry-run --Werror
RUFF="$HVL_VENV/bin/ruff"
[ -x "$RUFF" ] || RUFF=ruff
"$RUFF" check --quiet .
# Every docs/<file>.md (and section) the tree cites exists.
python3 ci/check_doc_refs.py
echo "lint: clang-format, ruff and the docs' references clean"
