#!/usr/bin/env bash
# Runs clang-tidy (the root .clang-tidy) over the library's sources, src/**/*.cpp, with a
# build's compile_commands.json, and fails on any finding (the CTest test clang_tidy runs this).
#   scripts/tidy.sh [BUILD_DIR] [-j N] [--update-record] [FILE...]
#                              BUILD_DIR defaults to build; N to 2; FILEs narrow the set (paths
#                              from the repository root, as BUILD_DIR is when relative)
# The record of clean checks, scripts/tidy/clean.txt: a file whose key is recorded there is
# not checked again. The key (scripts/tidy/cache.py) is a SHA-256 over everything the verdict
# depends on: clang-tidy's version, .clang-tidy, the file's path and compile arguments, and its
# whole preprocessed text as clang 14 sees it (every header, system ones too, every macro and
# comment: a NOLINT is one); a change to any of them checks the file again.
# --update-record: after a run without findings, record the keys of the files checked
# (without FILEs the record is rewritten: files gone drop out). PARAMWIN_TIDY_RECORD=0
# ignores the record (every file checked).
# Exits 0 with no finding, 1 with findings (each listed with its check), 2 on a usage or set-up
# error, 77 (CTest's skip) when clang-tidy is not installed (apt-get install clang-tidy).
# CLANG_TIDY selects the binary (default: clang-tidy-14, the reference, else clang-tidy).
# Left out: src/torch/ (clang-tidy 14 cannot parse LibTorch 1.13's headers in C++20 with
# GCC 12's libstdc++: errors on the incomplete c10::IValue, and ~50 s of CPU a file), and
# tests/, benchmarks/, examples/, python/ (not the library; headers of include/ and src/ are
# checked through the sources that include them, HeaderFilterRegex in .clang-tidy).
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=build
jobs=2
only=()
update_record=0
record=scripts/tidy/clean.txt
while [ $# -gt 0 ]; do
  case "$1" in
    -j) jobs=${2:?-j takes a number}; shift 2 ;;
    -j*) jobs=${1#-j}; shift ;;
    --update-record) update_record=1; shift ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    -*) echo "tidy.sh: unknown option $1" >&2; exit 2 ;;
    *)
      if [ -z "${build_set:-}" ]; then build_dir=$1; build_set=1; else only+=("$1"); fi
      shift ;;
  esac
done

clang_tidy=${CLANG_TIDY:-}
if [ -z "$clang_tidy" ]; then
  for candidate in clang-tidy-14 clang-tidy; do
    if command -v "$candidate" >/dev/null; then clang_tidy=$candidate; break; fi
  done
fi
if [ -z "$clang_tidy" ] || ! command -v "$clang_tidy" >/dev/null; then
  echo "tidy.sh: SKIPPED: clang-tidy not found (apt-get install clang-tidy, or set CLANG_TIDY)"
  exit 77
fi
db="$build_dir/compile_commands.json"
[ -f "$db" ] || { echo "tidy.sh: $db not found: configure the build first (cmake -S . -B $build_dir)" >&2; exit 2; }

# The library's sources that this build compiles (the database holds absolute paths).
root=$PWD
files=()
while IFS= read -r f; do
  if grep -qF "\"file\": \"$root/$f\"" "$db"; then
    files+=("$f")
  elif [ ${#only[@]} -gt 0 ]; then
    echo "tidy.sh: $f is not in $db: not checked" >&2
  fi
done < <(if [ ${#only[@]} -gt 0 ]; then printf '%s\n' "${only[@]}"; else
           git ls-files -- 'src/*.cpp' | grep -v '^src/torch/' | sort; fi)
[ ${#files[@]} -gt 0 ] || { echo "tidy.sh: no library source of $db found under $root/src" >&2; exit 2; }

# The files whose key is in the record were checked clean as they are now: leave them out.
# (The keys, about 11 s of CPU, only where the record is read or written.)
keys=$(mktemp)
use_record=0
[ "${PARAMWIN_TIDY_RECORD:-1}" != 0 ] && [ -f "$record" ] && use_record=1
if [ "$use_record" = 1 ] || [ "$update_record" = 1 ]; then
  /usr/bin/python3 scripts/tidy/cache.py "$db" "$root" "$clang_tidy" "${files[@]}" >"$keys" ||
    : >"$keys"
fi
all=("${files[@]}")
if [ "$use_record" = 1 ]; then
  files=()
  while read -r key f; do
    if [ "$key" = - ] || ! grep -qxF "$key $f" "$record"; then files+=("$f"); fi
  done <"$keys"
fi

# clang 14 lacks __builtin_source_location, so GCC 12's <source_location> is empty for it:
# scripts/tidy/source_location.hpp supplies std::source_location (a no-op for clang >= 15).
shim=(--extra-arg-before=-include --extra-arg-before="$root/scripts/tidy/source_location.hpp")
logs=$(mktemp -d)
trap 'rm -rf "$logs" "$keys"' EXIT
start=$(date +%s)
echo "tidy.sh: $("$clang_tidy" --version | grep -m1 -o 'version [0-9.]*') over ${#files[@]} files," \
     "-j $jobs; $((${#all[@]} - ${#files[@]})) of ${#all[@]} unchanged since their clean check" \
     "($record)"
i=0
running=0
for f in "${files[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n
    running=$((running - 1))
  fi
  i=$((i + 1))
  running=$((running + 1))
  ( rc=0
    "$clang_tidy" -p "$build_dir" --quiet --warnings-as-errors='*' "${shim[@]}" "$f" \
      >"$logs/$i.log" 2>&1 || rc=$?
    echo "$rc" >"$logs/$i.rc" ) &
done
wait

failed=0
for n in $(seq 1 "$i"); do
  rc=$(cat "$logs/$n.rc")
  if [ "$rc" != 0 ]; then
    failed=$((failed + 1))
    # Drop the counts clang-tidy prints for every file ("N warnings generated.").
    grep -v -E '^[0-9]+ (warnings?|errors?)( and [0-9]+ errors?)? generated\.$' "$logs/$n.log" || true
  fi
done
findings=$( { cat "$logs"/*.log 2>/dev/null || true; } |
  { grep -E '(warning|error): .*\[[a-z0-9.,-]+\]$' || true; } | sort -u | wc -l)
elapsed=$(($(date +%s) - start))
if [ "$failed" -gt 0 ]; then
  echo "tidy.sh: $findings findings in $failed of ${#files[@]} files (wall ${elapsed} s); fix them," \
       "or suppress one on its line with // NOLINT(check): why"
  exit 1
fi
echo "tidy.sh: no findings in ${#files[@]} files (wall ${elapsed} s)"
if [ "$update_record" = 1 ]; then
  # Every file of the set is clean now: its key goes in (keys that could not be computed, "-",
  # never do). Without FILEs the record holds exactly the set's keys.
  new=$(mktemp)
  if [ ${#only[@]} -gt 0 ] && [ -f "$record" ]; then
    awk 'NR == FNR { checked[$2] = 1; next } !($2 in checked)' "$keys" "$record" >"$new"
  fi
  grep -v '^- ' "$keys" >>"$new" || true
  sort -k2 "$new" >"$record"
  rm -f "$new"
  echo "tidy.sh: recorded $(grep -c . "$record") clean files in $record"
fi
