#!/usr/bin/env bash
# Formats paramwin's C++ and CUDA sources (.cpp .hpp .h .cc .cxx .hxx .cu .cuh) with clang-format
# and the root .clang-format.
#   scripts/format.sh            format src/ include/ tests/ benchmarks/ examples/ python/ in place
#   scripts/format.sh --check    change nothing; list the files that need formatting and exit
#                                1 if there are any (the CTest test format_check runs this)
# CLANG_FORMAT selects the binary (default: clang-format-14, else clang-format).
set -euo pipefail
cd "$(dirname "$0")/.."

check=0
case "${1:-}" in
  --check) check=1 ;;
  "") ;;
  -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
  *) echo "format.sh: unknown option $1" >&2; exit 2 ;;
esac

clang_format=${CLANG_FORMAT:-}
if [ -z "$clang_format" ]; then
  for candidate in clang-format-14 clang-format; do
    if command -v "$candidate" >/dev/null; then clang_format=$candidate; break; fi
  done
fi
[ -n "$clang_format" ] || { echo "format.sh: clang-format not found (apt-get install clang-format)" >&2; exit 2; }

dirs=(src include tests benchmarks examples python)
files=()
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  # Tracked and new (not ignored) files: what a commit would contain.
  while IFS= read -r f; do [ -f "$f" ] && files+=("$f"); done < <(
    git ls-files --cached --others --exclude-standard -- "${dirs[@]}" |
      grep -E '\.(cpp|hpp|h|cc|cxx|hxx|cu|cuh)$' | sort -u)
else
  while IFS= read -r f; do files+=("$f"); done < <(
    find "${dirs[@]}" -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' -o -name '*.cc' \
      -o -name '*.cu' -o -name '*.cuh' \) | sort)
fi

if [ "$check" = 0 ]; then
  "$clang_format" -i --style=file "${files[@]}"
  echo "format.sh: formatted ${#files[@]} files with $("$clang_format" --version)"
  exit 0
fi

bad=()
lines=0
for f in "${files[@]}"; do
  n=$("$clang_format" --style=file "$f" | diff -U0 "$f" - | grep -c '^-[^-]' || true)
  if [ "$n" -gt 0 ]; then
    bad+=("$f")
    lines=$((lines + n))
    echo "needs formatting: $f ($n lines)"
  fi
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "format.sh: ${#bad[@]} of ${#files[@]} files need formatting ($lines lines); run scripts/format.sh"
  exit 1
fi
echo "format.sh: all ${#files[@]} files formatted"
