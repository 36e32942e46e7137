# Sourced by the loopback benchmark scripts: their shared command line,
# "SCRIPT BUILD_DIR [--quick] [--report-only]". bench_cli_parse NAME ARGS...
# prints the script's usage on -h/--help (from its header comment) and sets
# BUILD (absolute), QUICK and REPORT_ONLY (0/1); a bad command line exits 2.
# shellcheck shell=bash
bench_cli_usage() { sed -n '2,/^set -e/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }
bench_cli_parse() {
  local name=$1 a
  shift
  [[ $# -ge 1 ]] || { bench_cli_usage >&2; exit 2; }
  case "$1" in -h|--help) bench_cli_usage; exit 0 ;; esac
  [[ -d "$1" ]] || { echo "$name: $1: no such build directory" >&2; exit 2; }
  BUILD=$(cd "$1" && pwd)
  shift
  QUICK=0
  REPORT_ONLY=0
  for a in "$@"; do
    case "$a" in
      --quick) QUICK=1 ;;
      --report-only) REPORT_ONLY=1 ;;
      *) echo "$name: unknown argument $a" >&2; exit 2 ;;
    esac
  done
}
