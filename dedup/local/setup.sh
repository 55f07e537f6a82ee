#!/usr/bin/env bash
# One-step set-up for a fresh Debian machine (run as root or with sudo rights):
#   * a virtual environment in .venv with this project installed (editable, [dev,connect])
#     and PySpark pinned to DEDUP_SPARK_VERSION;
#   * Debian's redis-server when it is missing;
#   * the Kafka broker jars and Spark's Kafka connector jars, from Maven Central,
#     into .cache/jars/{kafka-broker,spark-kafka-<pyspark version>}
#     (`dedup fetch-jars`, which an installed wheel's user runs instead of this).
# Idempotent: each step leaves a stamp and is skipped when its inputs did not change.
#
# Environment:
#   DEDUP_SPARK_VERSION  PySpark to install (default: the last line of
#                        dedup/local/spark-version); its Kafka connector must be
#                        on Maven Central, which is why it is pinned exactly.
#   DEDUP_VENV           the virtual environment (default .venv; relative paths
#                        are taken from the repository root), e.g. an older Spark:
#     DEDUP_SPARK_VERSION=4.0.0 DEDUP_VENV=.venv-4.0.0 bash dedup/local/setup.sh
#     .venv-4.0.0/bin/python -m pytest tests/integration
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
cache="$repo/.cache"
venv="${DEDUP_VENV:-.venv}"
case "$venv" in /*) ;; *) venv="$repo/$venv" ;; esac
spark_wanted="${DEDUP_SPARK_VERSION:-$(grep -v '^[[:space:]]*#' dedup/local/spark-version | grep -v '^[[:space:]]*$' | tail -1)}"
quiet="${DEDUP_SETUP_QUIET:-}"

say() { [ -n "$quiet" ] || echo "[setup] $*" >&2; }
die() { echo "[setup] error: $*" >&2; exit 1; }
need() { command -v "$1" >/dev/null 2>&1 || die "$1 not found: $2"; }
[[ "$spark_wanted" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] \
  || die "DEDUP_SPARK_VERSION must be an exact version (major.minor.patch), not '$spark_wanted'"

mkdir -p "$cache"

# --- system packages -------------------------------------------------------
need python3 "install Python 3.11 (apt-get install python3 python3-venv)"
need java "install a JDK 17 (apt-get install openjdk-17-jdk-headless)"
need mvn "install Maven (apt-get install maven)"
if ! command -v redis-server >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing Debian's redis-server"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends redis-server >/dev/null
  else
    die "redis-server not found: run 'apt-get install redis-server' as root"
  fi
fi
# Debian's package may start a system-wide server; our tools start their own.
if command -v service >/dev/null 2>&1 && pgrep -f '/usr/bin/redis-server 127.0.0.1:6379' >/dev/null 2>&1; then
  service redis-server stop >/dev/null 2>&1 || true
fi

# --- Python virtual environment ---------------------------------------------
# The stamp lives in the venv (several venvs may share .cache) and names the
# PySpark version, so choosing another version reinstalls.
py_stamp="$venv/.dedup-setup-$(cat pyproject.toml <(echo "pyspark==$spark_wanted") | sha256sum | cut -c1-16)"
if [ ! -x "$venv/bin/python" ] || [ ! -f "$py_stamp" ]; then
  say "creating virtual environment ${venv#$repo/} and installing the project with PySpark $spark_wanted (about a minute on a fresh machine)"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  constraints="$cache/constraints-pyspark-$spark_wanted.txt"
  echo "pyspark==$spark_wanted" >"$constraints"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -c "$constraints" -e ".[dev,connect]" \
    || die "pip could not install the project with pyspark==$spark_wanted (pyproject.toml allows: $(grep -o '"pyspark[^"]*"' pyproject.toml))"
  rm -f "$venv"/.dedup-setup-*
  touch "$py_stamp"
fi

# --- the checkout's own byte code -------------------------------------------
# pip compiles what it installs, but not this editable checkout: a Python run with
# PYTHONDONTWRITEBYTECODE set (the project's session machines set it) compiled the
# toolkit again in every process, each Spark Python worker and `dedup run` child among
# them (0.07-0.13 s each, measured 2026-12-04). A source changed later makes its file
# stale, which Python sees and compiles in memory, as before. Cheap (0.2 s): not stamped.
"$venv/bin/python" -m compileall -q dedup sinks sources benchmarks tests \
  || die "python could not compile the checkout's sources (the line above says which)"

# --- byte code for PySpark's pyspark.zip and Py4J's zip ---------------------
# Spark puts both zips first on the path of every Python process it starts (workers,
# the driver's data source planners, a streaming source's runner), and zipped sources
# are compiled anew in each: 0.5 CPU s per process (dedup/local/pyspark_zip.py).
# Left alone once done (a few seconds the first time).
"$venv/bin/python" -m dedup.local.pyspark_zip ${quiet:+-q} \
  || die "python could not add byte code to PySpark's zips (the line above says why)"

# --- jars from Maven Central ------------------------------------------------
# The one home of the fetch is `dedup fetch-jars` (dedup/local/jars.py): the
# same pom, settings, folders and stamps for a checkout and an installed wheel.
spark_version="$("$venv/bin/python" -c 'import pyspark; print(pyspark.__version__)')"
[ "$spark_version" = "$spark_wanted" ] \
  || die "${venv#$repo/} has PySpark $spark_version, not $spark_wanted (installed by hand?): remove ${venv#$repo/} and rerun"
# Into this checkout's .cache whatever the caller's environment points elsewhere.
env -u DEDUP_KAFKA_JARS -u DEDUP_SPARK_KAFKA_JARS \
  "$venv/bin/python" -m dedup.cli.main --cache-dir "$cache" fetch-jars ${quiet:+--quiet} >&2 \
  || die "the jars could not be fetched (the line above says why)"
say "ready: venv=$venv spark=$spark_version"
