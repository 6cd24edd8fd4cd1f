#!/bin/sh
# The floors of docs/design.md, checked from the include lines of the tree:
#   core/ -> kernels/, net/ (never each other) -> ring/ -> programs (infer/, src/, bench/, python/)
# Programs include only the public headers (include/ringattn/) and their own files; the
# library never includes a program. Exits 1 listing every include that breaks a rule.
# Usage: check_floors.sh [SOURCE_ROOT]
root=${1:-$(dirname "$0")/../..}
cd "$root" || exit 2
bad=0
rule() {  # rule "what is forbidden" "dirs to scan" "regex of forbidden include paths"
  what=$1 dirs=$2 pattern=$3
  hits=$(grep -rnE "^[[:space:]]*#[[:space:]]*include[[:space:]]+\"($pattern)" $dirs --include='*.cpp' --include='*.hpp' --include='*.h' 2>/dev/null)
  if [ -n "$hits" ]; then
    echo "floors: $what:"
    echo "$hits" | sed 's/^/  /'
    bad=1
  fi
}
rule "a program includes a private header of the library (use include/ringattn/ only)" "infer src bench python" "core/|kernels/|net/|ring/"
rule "the library includes a program" "core kernels net ring include" "infer/|src/|bench/|python/|tests/"
rule "the model runtime (infer/) includes a program above it" "infer" "src/|bench/|python/|tests/"
rule "kernels/ includes net/ or ring/" "kernels" "net/|ring/"
rule "net/ includes kernels/ or ring/" "net" "kernels/|ring/"
rule "core/ includes a floor above it" "core" "kernels/|net/|ring/"
rule "a public header includes a private one" "include" "core/|kernels/|net/|ring/"
[ "$bad" = 0 ] && echo "floors: programs on the public API only; no include runs back up a floor"
exit $bad
