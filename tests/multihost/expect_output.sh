#!/usr/bin/env bash
# Runs a command, shows its output, and fails unless it succeeded and its output
# matches an extended regular expression (exit 77, CTest's skip, passes through):
#
#   tests/multihost/expect_output.sh REGEX -- COMMAND [ARGS...]
set -uo pipefail
[ $# -ge 3 ] && [ "$2" = -- ] || { echo "usage: $0 REGEX -- COMMAND [ARGS...]" >&2; exit 2; }
regex="$1"
shift 2
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
"$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
[ $rc = 0 ] || exit $rc
if ! grep -Eq -- "$regex" "$log"; then
  echo "$0: the output does not match /$regex/" >&2
  exit 1
fi
