#!/usr/bin/env bash
# Test slurm_docs_sbatch (label lint): the job script docs/cluster.md shows (between its
# "begin/end scripts/slurm/age_replacement.sbatch" markers) is the file the tests submit.
#   check_docs.sh REPO_ROOT
set -euo pipefail
root=$1
shown=$(awk '/^<!-- begin scripts\/slurm\/age_replacement.sbatch -->$/ { on = 1; next }
             /^<!-- end scripts\/slurm\/age_replacement.sbatch -->$/ { on = 0 }
             on && !/^```/' "$root/docs/cluster.md")
[[ -n $shown ]] || { echo "check_docs: docs/cluster.md shows no job script" >&2; exit 1; }
if ! diff <(printf '%s\n' "$shown") "$root/scripts/slurm/age_replacement.sbatch"; then
  echo "check_docs: docs/cluster.md's job script differs from scripts/slurm/age_replacement.sbatch" >&2
  exit 1
fi
echo "check_docs: docs/cluster.md shows scripts/slurm/age_replacement.sbatch as it is"
