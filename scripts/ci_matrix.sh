#!/usr/bin/env bash
# The other Pythons, which .ci/run runs after its main run (Python 3.11, the newest
# dependencies, every test). Each job runs the quick suite, python -m pytest -m "not slow", in
# a fresh venv in a temporary folder that is removed afterwards:
#
#   lowest-3.10   Python 3.10 with every dependency at the floor pyproject.toml names (uv's
#                 --resolution lowest-direct), which scripts/ci_floors.py checks first
#   newest-3.12   Python 3.12 with the newest dependencies, less REDIS_SIDE (below)
#   newest-3.13   Python 3.13 with the newest dependencies, less REDIS_SIDE
#
#   bash scripts/ci_matrix.sh                # all three, as CI runs them
#   bash scripts/ci_matrix.sh lowest-3.10    # one job (or several, named)
#
# Each Python is looked for as python3.X on the PATH, then under pyenv's versions
# (/root/.pyenv, $PYENV_ROOT, $(pyenv root)). One that is not found fails its job, loudly;
# with FREQGUARD_CI_SKIP_PYTHONS=1 the job is skipped instead, as loudly. The jobs need uv
# (for the lowest resolution, and fast installs): the one on the PATH, else one installed
# here with pip.
set -euo pipefail
cd "$(dirname "$0")/.."

JOBS=(lowest-3.10 newest-3.12 newest-3.13)
# The newest jobs leave out the tests of the Redis edge itself (pools, slots and resharding,
# replicas, server memory, eight processes on one limit): 6 % of the quick run's tests but
# 45 % of its time, which goes to Redis servers and child processes, not to the interpreter.
# The main run and lowest-3.10 run them all. What Pythons change (asyncio's timeouts and
# cancellation, threads, typing and signatures, argparse, the HTTP frameworks, parsers) runs
# in the rest: the behaviour tests on memory, Redis and Redis Cluster, sync and async, and
# the fault drills (tests/backends/test_faults.py, test_fault_replies.py).
REDIS_SIDE=(
  tests/backends/test_cluster_edges.py
  tests/backends/test_cluster_new_node.py
  tests/backends/test_ha.py
  tests/backends/test_redis.py
  tests/backends/test_redis_async.py
  tests/backends/test_redis_cluster_changes.py
  tests/backends/test_redis_cluster_errors.py
  tests/backends/test_redis_direct.py
  tests/backends/test_redis_durability.py
  tests/backends/test_redis_flush_race.py
  tests/backends/test_redis_lanes.py
  tests/backends/test_redis_limits.py
  tests/backends/test_redis_memory.py
)
export UV_PYTHON_DOWNLOADS=never  # the interpreters are this machine's, never fetched

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The interpreter for version X.Y, or nothing. Every candidate is asked its version: a pyenv
# shim is on the PATH for every version pyenv has, but runs only the ones selected.
find_python() {
  local version=$1 candidate
  local roots=(/root/.pyenv "${PYENV_ROOT:-$HOME/.pyenv}")
  if command -v pyenv >/dev/null; then roots+=("$(pyenv root)"); fi
  {
    command -v "python$version" || true
    for root in "${roots[@]}"; do
      printf '%s\n' "$root"/versions/"$version".*/bin/"python$version" | sort -rV
    done
  } | while read -r candidate; do
    if [ -x "$candidate" ] && "$candidate" -c \
      "import sys; sys.exit(f'{sys.version_info[0]}.{sys.version_info[1]}' != '$version')" \
      2>/dev/null; then
      echo "$candidate"
      break
    fi
  done
}

uv_binary() {
  if command -v uv >/dev/null; then
    command -v uv
  else
    python3 -m venv "$work/uv" && "$work/uv/bin/python" -m pip install -q uv >&2
    echo "$work/uv/bin/uv"
  fi
}

run_job() {
  local job=$1 version=${1#*-} resolution=highest python venv started=$SECONDS
  if [ "${job%%-*}" = lowest ]; then resolution=lowest-direct; fi
  python="$(find_python "$version")"
  if [ -z "$python" ]; then
    echo "ci_matrix: ********** NO PYTHON $version: job $job NOT RUN **********" >&2
    echo "ci_matrix: looked for python$version on the PATH and under pyenv's versions" >&2
    missing+=("$job")
    return 0
  fi
  echo "ci_matrix: $job: $("$python" --version) ($python), --resolution $resolution"
  venv="$work/$job"
  "$uv" venv -q --python "$python" "$venv"
  "$uv" pip install -q --python "$venv/bin/python" --resolution "$resolution" -e ".[all,test]"
  if [ "$resolution" = lowest-direct ]; then
    "$venv/bin/python" scripts/ci_floors.py all test
    "$venv/bin/python" -m pytest -m "not slow" -q
  else
    "$venv/bin/python" -m pytest -m "not slow" -q "${REDIS_SIDE[@]/#/--ignore=}"
  fi
  rm -rf "$venv"
  timings+=("$job $((SECONDS - started)) s")
}

if [ $# -eq 0 ]; then set -- "${JOBS[@]}"; fi
for job in "$@"; do
  if [[ ! " ${JOBS[*]} " =~ " $job " ]]; then
    echo "ci_matrix: unknown job '$job'; the jobs: ${JOBS[*]}" >&2
    exit 2
  fi
done
uv="$(uv_binary)"
echo "ci_matrix: $("$uv" --version)"
missing=()
timings=()
for job in "$@"; do
  run_job "$job"
done
for line in "${timings[@]}"; do echo "ci_matrix: passed: $line"; done
if [ ${#missing[@]} -gt 0 ]; then
  echo "ci_matrix: ********** NOT RUN, NO PYTHON: ${missing[*]} **********" >&2
  if [ "${FREQGUARD_CI_SKIP_PYTHONS:-}" = 1 ]; then
    echo "ci_matrix: skipped, as FREQGUARD_CI_SKIP_PYTHONS=1 asks" >&2
  else
    echo "ci_matrix: failing; FREQGUARD_CI_SKIP_PYTHONS=1 would skip them instead" >&2
    exit 1
  fi
fi
