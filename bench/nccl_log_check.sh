#!/usr/bin/env bash
# nccl_log_check.sh: from stock NCCL's own logs (NCCL_DEBUG=INFO,
# NCCL_DEBUG_SUBSYS including INIT,NET,TUNING; one NCCL_DEBUG_FILE per rank),
# decide whether the rerail net plugin carried the traffic and whether
# rerail's tuner was loaded. NCCL's INFO lines are the documented way to see
# which transport it chose; nothing here needs rerail's own wording.
#
# usage: bench/nccl_log_check.sh [--net NAME] [--tuner NAME|--no-tuner] LOG...
#   --net NAME     the net NCCL must use (default rerail: RR_ABI_NET_NAME)
#   --tuner NAME   the tuner NCCL must load (default rerail: RR_ABI_TUNER_NAME)
#   --no-tuner     do not look for a tuner
# Every LOG is one rank's log. Checks, per log:
#   loaded   "NET/Plugin: Loaded net plugin NAME" or "Using network NAME"
#   carried  at least one "Channel ... via NET/NAME/..." line, and no channel
#            "via NET/<another net>" (NCCL's Socket or IB) nor via P2P/SHM
#   tuner    "TUNER/Plugin: Using NAME" (or NCCL's "Successfully loaded
#            external tuner plugin ...NAME...", or the tuner's own INFO line
#            "NET/NAME: tuner: bound as ncclTunerPlugin_vN"); the collectives
#            it was asked about ("tuner: comm ... finalized after N
#            collectives") are counted, not required
# Prints one line per log and one of totals (key=value counts); exit 0 when
# every check passed, 1 when one failed, 2 on usage errors or a missing log.
#
# Sourced (bench/device_check.sh), it only defines nccl_log_check ARGS...
# with the same arguments and exit status (as its return value).

nccl_log_check() {
  local net=rerail tuner=rerail logs=() f rc=0
  while [[ $# -gt 0 ]]; do
    case $1 in
      --net) net=${2:?--net needs a name}; shift 2 ;;
      --tuner) tuner=${2:?--tuner needs a name}; shift 2 ;;
      --no-tuner) tuner=""; shift ;;
      -h | --help) sed -n '2,24p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; return 0 ;;
      --) shift; logs+=("$@"); break ;;
      -*) echo "nccl_log_check: unknown option '$1'" >&2; return 2 ;;
      *) logs+=("$1"); shift ;;
    esac
  done
  [[ ${#logs[@]} -gt 0 ]] || { echo "nccl_log_check: no log given" >&2; return 2; }
  local t_loaded=0 t_ours=0 t_other=0 t_bypass=0 t_tuner=0 t_colls=0 t_plugin_lines=0 others=""
  for f in "${logs[@]}"; do
    if [[ ! -s $f ]]; then
      echo "nccl_log_check: $f: missing or empty (was NCCL_DEBUG_FILE set, NCCL_DEBUG=INFO?)" >&2
      rc=2
      continue
    fi
    local loaded ours other bypass tun lines colls=0 bad=()
    # Counts, not wording: grep -c on NCCL's format strings (2.2x, src/plugin/*.cc, transport.cc).
    loaded=$(grep -cE "NET/Plugin: Loaded net plugin ${net} |Using network ${net}\$" "$f")
    ours=$(grep -cE "Channel [0-9]+/[0-9]+ .* via NET/${net}/" "$f")
    other=$(grep -E "Channel [0-9]+/[0-9]+ .* via NET/" "$f" | grep -cvE "via NET/${net}/")
    bypass=$(grep -cE "Channel [0-9]+/[0-9]+ .* via (P2P|SHM)" "$f")
    lines=$(grep -c "NET/${net}:" "$f")
    tun=0
    if [[ -n $tuner ]]; then
      tun=$(grep -cE "TUNER/Plugin: Using ${tuner} |Successfully loaded external tuner plugin .*${tuner}|NET/${tuner}: tuner: bound as ncclTunerPlugin_v" "$f")
      colls=$(sed -n "s|.*NET/${tuner}: tuner: comm .* finalized after \([0-9]*\) collectives.*|\1|p" "$f" | awk '{ s += $1 } END { print s + 0 }')
    fi
    ((loaded > 0)) || bad+=("net plugin '$net' not loaded")
    ((ours > 0)) || bad+=("no channel via NET/$net")
    if ((other > 0)); then
      bad+=("$other channel line(s) via another net")
      others+=" $(grep -oE "via NET/[^/ ]+" "$f" | grep -v "via NET/${net}\$" | sort -u | tr '\n' ' ')"
    fi
    ((bypass == 0)) || bad+=("$bypass channel line(s) via P2P/SHM (the net was bypassed)")
    [[ -z $tuner ]] || ((tun > 0)) || bad+=("tuner '$tuner' not loaded")
    if [[ ${#bad[@]} -eq 0 ]]; then
      echo "  ok   $f: net $net loaded, $ours channel line(s) via NET/$net${tuner:+, tuner $tuner loaded}"
    else
      local IFS=';'
      echo "  FAIL $f: ${bad[*]}"
      rc=$((rc > 1 ? rc : 1))
    fi
    t_loaded=$((t_loaded + (loaded > 0))) t_ours=$((t_ours + ours)) t_other=$((t_other + other))
    t_bypass=$((t_bypass + bypass)) t_tuner=$((t_tuner + (tun > 0))) t_colls=$((t_colls + colls)) t_plugin_lines=$((t_plugin_lines + lines))
  done
  echo "nccl_log_check: logs=${#logs[@]} net_loaded=$t_loaded channels_via_$net=$t_ours channels_via_other=$t_other" \
       "bypass=$t_bypass tuner_loaded=$t_tuner tuner_collectives=$t_colls ${net}_log_lines=$t_plugin_lines${others:+ other_nets:$(echo "$others" | tr -s ' ' | sed 's/ $//')}"
  return $rc
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  set -u
  nccl_log_check "$@"
  exit $?
fi
