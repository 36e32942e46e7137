/* Process-wide event counters (rr_counters.h). */
#include "rr_counters.h"

#include <stdio.h>

_Atomic uint64_t rr_counter_values[RR_CTR_COUNT];

#define VIOLATION_HELP                                                                               \
  "Peer input that broke the wire protocol, by kind (no_receive, chunk_index, length, duplicate, "  \
  "key, address, malformed, window, claim, direction, epoch, overflow); each failed the rail it "   \
  "came on over."

#define LISTEN_HELP                                                                                  \
  "Connections the process's listeners refused, by reason: per_source_cap, crowded_out, "            \
  "no_handshake, closed, not_rerail, setup_version, malformed, wrong_secret, stale_reconnect, "      \
  "runaway_generation, other."

#define TCP_HELP                                                                                     \
  "Frames the TCP rail refused from its peer, by kind (unknown_flags, oversized_control, "          \
  "drain_with_payload, unknown_type); each failed the rail it came on over."

#define CONNECT_MS_HELP                                                                              \
  "Seconds connect() took per connection, summed over connections, by phase: first_rail (first " \
  "call to a rail up), other_rails (then to the set of rails decided), install (then to the comm "  \
  "handed out); divided by connects_total, each phase's mean."

#define PROBES_HELP                                                                                  \
  "Probes of demoted rails, by verdict: healthy (at the restore bar), between, slow (under the "    \
  "demotion bar, lossy or too late), timed_out; traffic returns after healthy ones for the hold."

#define CONTROL_HELP                                                                                 \
  "Control requests rails posted to keep connections judged for silence, by kind: probe (a PROBE "   \
  "message on a rail silent for a quarter of the progress timeout, or down or recovering), signal " \
  "(verbs: a signalled credit word behind requests someone asked about), credit (verbs: a credit "   \
  "word with no message to carry it)."

static const rr_counter_info infos[] = {
#define VIOLATION(v) "protocol_violations_total", VIOLATION_HELP, "kind", v, 1
    [RR_CTR_VIOL_NO_RECEIVE] = {VIOLATION("no_receive")},
    [RR_CTR_VIOL_CHUNK_INDEX] = {VIOLATION("chunk_index")},
    [RR_CTR_VIOL_LENGTH] = {VIOLATION("length")},
    [RR_CTR_VIOL_DUPLICATE] = {VIOLATION("duplicate")},
    [RR_CTR_VIOL_KEY] = {VIOLATION("key")},
    [RR_CTR_VIOL_ADDRESS] = {VIOLATION("address")},
    [RR_CTR_VIOL_MALFORMED] = {VIOLATION("malformed")},
    [RR_CTR_VIOL_WINDOW] = {VIOLATION("window")},
    [RR_CTR_VIOL_CLAIM] = {VIOLATION("claim")},
    [RR_CTR_VIOL_DIRECTION] = {VIOLATION("direction")},
    [RR_CTR_VIOL_EPOCH] = {VIOLATION("epoch")},
    [RR_CTR_VIOL_OVERFLOW] = {VIOLATION("overflow")},
#undef VIOLATION
    [RR_CTR_ROLLBACKS] = {"rollbacks_total",
                          "Rollback epochs started (receiving connections) or adopted (sending connections).", NULL, NULL, 1},
    [RR_CTR_CLOSES_OWED] = {"closes_owed_total",
                            "Connection closes that gave up with data still owed to the peer undelivered.", NULL, NULL, 1},
    [RR_CTR_PARKED_SENDS] = {"parked_sends_total",
                             "Eager sends parked because the receive they reached did not post their tag.", NULL, NULL, 1},
    [RR_CTR_PLACED_SENDS] = {"placed_sends_total",
                             "Sends completed on their writes' placement in the receiver's memory, before any ack.", NULL, NULL, 1},
    [RR_CTR_PLACED_CLAIMS] = {"placed_claims_total",
                              "Sub-receives completed on the sender's claim that its writes were placed.", NULL, NULL, 1},
    [RR_CTR_SPLIT_WRITES] = {"split_writes_total",
                             "Writes sent split for adaptive routing: the bulk as a plain RDMA write, the rest with "
                             "the immediate.", NULL, NULL, 1},
    [RR_CTR_DEMOTIONS] = {"rail_demotions_total", "Rails demoted as degraded, every connection of the process.", NULL, NULL, 0},
    [RR_CTR_RAIL_RECONNECTS] = {"rail_reconnects_total",
                                "Rails of live connections given a fresh transport endpoint after a failure.", NULL, NULL, 1},
    [RR_CTR_CONNECT_START_OVERS] = {"connect_start_overs_total",
                                    "Connection attempts started over as a new connection: a setup socket "
                                    "failed after the set of rails went out ahead of the listener's answers.",
                                    NULL, NULL, 1},
    [RR_CTR_CONNECTS] = {"connects_total", "Send comms connect() handed out.", NULL, NULL, 1},
#define CONNECT_MS(v) "connect_time_seconds_total", CONNECT_MS_HELP, "phase", v, 1
    [RR_CTR_CONNECT_MS_FIRST_RAIL] = {CONNECT_MS("first_rail")},
    [RR_CTR_CONNECT_MS_OTHER_RAILS] = {CONNECT_MS("other_rails")},
    [RR_CTR_CONNECT_MS_INSTALL] = {CONNECT_MS("install")},
#undef CONNECT_MS
    [RR_CTR_CONNECT_SETTLE_WAITS] = {"connect_settle_waits_total",
                                     "Connections whose connect() had a rail up and still returned no comm, "
                                     "waiting for another rail of its plan.", NULL, NULL, 1},
    [RR_CTR_CONNECT_RAILS_DEFERRED] = {"connect_rails_deferred_total",
                                       "Rails of a connection's plan not up when connect() handed it out: they "
                                       "belong to it, reopened once reachable.", NULL, NULL, 1},
    [RR_CTR_CONNECT_DEFERRED_UP] = {"connect_deferred_rails_up_total",
                                    "Of those deferred rails, the ones reopened and installed since.", NULL, NULL, 1},
    [RR_CTR_CONNECT_DEFERRED_MS] = {"connect_deferred_window_seconds_total",
                                    "Seconds those connections ran without their deferred rail (handed out "
                                    "to the rail installed), summed over the rails installed.", NULL, NULL, 1},
#define SETUP_CALL(v) "setup_call_seconds_total", "Seconds spent inside NCCL's connect() and accept() calls, " \
                      "summed over calls, by call: set beside the setup's wall time, how much of it is this " \
                      "process's own work.", "call", v, 1
    [RR_CTR_SETUP_CALL_US_CONNECT] = {SETUP_CALL("connect")},
    [RR_CTR_SETUP_CALL_US_ACCEPT] = {SETUP_CALL("accept")},
#undef SETUP_CALL
#define SETUP_CALLS(v) "setup_calls_total", "NCCL's connect() and accept() calls, by call: NCCL calls each " \
                       "again until it returns a comm.", "call", v, 1
    [RR_CTR_SETUP_CALLS_CONNECT] = {SETUP_CALLS("connect")},
    [RR_CTR_SETUP_CALLS_ACCEPT] = {SETUP_CALLS("accept")},
#undef SETUP_CALLS
#define SETUP_EP(v) "setup_endpoint_seconds_total", "Seconds opening (open) and connecting (connect) rails' " \
                    "endpoints during connection setup and reopening, summed, by step.", "step", v, 1
    [RR_CTR_SETUP_EP_US_OPEN] = {SETUP_EP("open")},
    [RR_CTR_SETUP_EP_US_CONNECT] = {SETUP_EP("connect")},
#undef SETUP_EP
    [RR_CTR_FAILOVERS] = {"failovers_total", "Failovers, every connection of the process.", NULL, NULL, 0},
    [RR_CTR_FAILBACKS] = {"failbacks_total", "Fail-backs, every connection of the process.", NULL, NULL, 0},
    [RR_CTR_CONNECTION_ERRORS] = {"connection_errors_total",
                                  "Connections that failed for good, every peer of the process.", NULL, NULL, 0},
    [RR_CTR_SETTINGS_REFUSED] = {"settings_refused_total",
                                 "RERAIL_* settings refused (malformed, out of range, matching nothing); "
                                 "a default was used instead.", NULL, NULL, 1},
#define REFUSED(v) "listener_refusals_total", LISTEN_HELP, "reason", v, 1
    [RR_CTR_REFUSED_PER_SOURCE] = {REFUSED("per_source_cap")},
    [RR_CTR_REFUSED_CROWDED_OUT] = {REFUSED("crowded_out")},
    [RR_CTR_REFUSED_NO_HANDSHAKE] = {REFUSED("no_handshake")},
    [RR_CTR_REFUSED_CLOSED] = {REFUSED("closed")},
    [RR_CTR_REFUSED_NOT_RERAIL] = {REFUSED("not_rerail")},
    [RR_CTR_REFUSED_SETUP_VERSION] = {REFUSED("setup_version")},
    [RR_CTR_REFUSED_MALFORMED] = {REFUSED("malformed")},
    [RR_CTR_REFUSED_WRONG_SECRET] = {REFUSED("wrong_secret")},
    [RR_CTR_REFUSED_STALE_RECONNECT] = {REFUSED("stale_reconnect")},
    [RR_CTR_REFUSED_RUNAWAY] = {REFUSED("runaway_generation")},
    [RR_CTR_REFUSED_OTHER] = {REFUSED("other")},
#undef REFUSED
#define TCP_BAD(v) "tcp_frames_refused_total", TCP_HELP, "kind", v, 1
    [RR_CTR_TCP_BAD_FLAGS] = {TCP_BAD("unknown_flags")},
    [RR_CTR_TCP_BAD_CONTROL_SIZE] = {TCP_BAD("oversized_control")},
    [RR_CTR_TCP_BAD_DRAIN] = {TCP_BAD("drain_with_payload")},
    [RR_CTR_TCP_BAD_TYPE] = {TCP_BAD("unknown_type")},
#undef TCP_BAD
    [RR_CTR_VERBS_LIB_UNUSABLE] = {"verbs_library_unusable_total",
                                   "1 when libibverbs could not be loaded: no verbs devices, every rail runs TCP.",
                                   NULL, NULL, 1},
    [RR_CTR_VERBS_DEVICES_OPENED] = {"verbs_devices_opened_total", "RDMA ports opened as devices on the verbs rail.",
                                     NULL, NULL, 1},
    [RR_CTR_VERBS_ENDPOINTS_CONNECTED] = {"verbs_endpoints_connected_total",
                                          "Verbs rail endpoints connected to their peer (reconnects included).",
                                          NULL, NULL, 1},
    [RR_CTR_VERBS_QPS_CONNECTED] = {"verbs_queue_pairs_connected_total",
                                    "Queue pairs of those endpoints: RERAIL_IB_QPS_PER_RAIL each when both ends offer it.",
                                    NULL, NULL, 1},
    [RR_CTR_VERBS_REGISTRATIONS] = {"verbs_registrations_total",
                                    "Buffers registered with an RDMA NIC (each pins its pages).", NULL, NULL, 1},
    [RR_CTR_VERBS_REGISTRATIONS_AFTER_DOWN] = {"verbs_registrations_after_down_total",
                                               "Buffers registered with an RDMA NIC after a NIC or rail of the "
                                               "process went down: 0 when every buffer was registered on every NIC "
                                               "up front, as it should be.", NULL, NULL, 1},
    [RR_CTR_VERBS_FLUSH_READS] = {"verbs_flush_reads_total",
                                  "RDMA reads completed to flush receives into GPU memory.", NULL, NULL, 1},
    [RR_CTR_VERBS_STRAY_COMPLETIONS] = {"verbs_stray_completions_total",
                                        "Completions on a verbs endpoint's completion queue that named none of "
                                        "its queue pairs: dropped, as nothing waits for them; 0 unless a "
                                        "provider misroutes completions.", NULL, NULL, 1},
    [RR_CTR_FLUSH_REQUESTS] = {"flush_requests_total",
                               "Flush requests handed to NCCL for receives into GPU memory.", NULL, NULL, 1},
#define PROBES(v) "rail_probes_total", PROBES_HELP, "result", v, 1
    [RR_CTR_PROBES_HEALTHY] = {PROBES("healthy")},
    [RR_CTR_PROBES_BETWEEN] = {PROBES("between")},
    [RR_CTR_PROBES_SLOW] = {PROBES("slow")},
    [RR_CTR_PROBES_TIMED_OUT] = {PROBES("timed_out")},
#undef PROBES
    [RR_CTR_PROBE_BYTES] = {"rail_probe_bytes_total", "Bytes of the probes of demoted rails that completed.", NULL,
                            NULL, 1},
    [RR_CTR_PROBE_RATE_KBPS] = {"rail_probe_rate_kbps_total",
                                "The rate of each of those probes, post to the peer's acknowledgement, kB/s, "
                                "summed (over the completed probes: their mean rate).", NULL, NULL, 1},
    [RR_CTR_PROBE_REFERENCE_KBPS] = {"rail_probe_reference_kbps_total",
                                     "The rate each completed probe was judged against (the restore bar is "
                                     "RERAIL_DEGRADED_RESTORE_PCT of it), kB/s, summed over those probes.",
                                     NULL, NULL, 1},
#define CONTROL(v) "rail_control_requests_total", CONTROL_HELP, "kind", v, 1
    [RR_CTR_CONTROL_PROBES] = {CONTROL("probe")},
    [RR_CTR_CONTROL_SIGNALS] = {CONTROL("signal")},
    [RR_CTR_CONTROL_CREDITS] = {CONTROL("credit")},
#undef CONTROL
    [RR_CTR_BACKGROUND_DRIVES] = {"background_drives_total",
                                  "Connections driven by the background thread (their rails progressed and "
                                  "judged for silence) while NCCL was not calling into them.", NULL, NULL, 1},
    /* A test knob's: a test that forges a write must know it did (else it
     * proves nothing); no dashboard wants it. */
    [RR_CTR_TEST_FORGED_WRITES] = {"test_forged_writes_total",
                                   "Writes sent with a forged immediate (RERAIL_TEST_FORGE_WRITE).", NULL, NULL, 0},
};
_Static_assert(sizeof infos / sizeof infos[0] == RR_CTR_COUNT, "one rr_counter_info per rr_counter");

uint64_t rr_counter_get(rr_counter c) {
  if ((unsigned)c >= RR_CTR_COUNT) return 0;
  return atomic_load_explicit(&rr_counter_values[c], memory_order_relaxed);
}

const rr_counter_info *rr_counter_info_of(rr_counter c) {
  return (unsigned)c < RR_CTR_COUNT ? &infos[c] : NULL;
}

/* The times among the counters: how many of their units make a second. */
static const unsigned per_second[RR_CTR_COUNT] = {
    [RR_CTR_CONNECT_MS_FIRST_RAIL] = 1000,      [RR_CTR_CONNECT_MS_OTHER_RAILS] = 1000,
    [RR_CTR_CONNECT_MS_INSTALL] = 1000,         [RR_CTR_CONNECT_DEFERRED_MS] = 1000,
    [RR_CTR_SETUP_CALL_US_CONNECT] = 1000000,   [RR_CTR_SETUP_CALL_US_ACCEPT] = 1000000,
    [RR_CTR_SETUP_EP_US_OPEN] = 1000000,        [RR_CTR_SETUP_EP_US_CONNECT] = 1000000,
};

int rr_counter_format_value(char *buf, size_t len, rr_counter c) {
  if ((unsigned)c >= RR_CTR_COUNT) return snprintf(buf, len, "0");
  unsigned long long v = (unsigned long long)rr_counter_get(c);
  unsigned per = per_second[c];
  if (per <= 1) return snprintf(buf, len, "%llu", v);
  int decimals = 0;
  for (unsigned p = per; p > 1; p /= 10) decimals++;
  return snprintf(buf, len, "%llu.%0*llu", v / per, decimals, v % per);
}

int rr_counters_format(char *buf, size_t len) {
  size_t at = 0;
  for (int c = 0; c < RR_CTR_COUNT; c++) {
    const rr_counter_info *ci = &infos[c];
    char v[32];
    rr_counter_format_value(v, sizeof v, (rr_counter)c);
    int n = ci->label ? snprintf(buf + at, len - at, "%s{%s=%s} %s\n", ci->name, ci->label, ci->value, v)
                      : snprintf(buf + at, len - at, "%s %s\n", ci->name, v);
    if (n < 0 || (size_t)n >= len - at) return -1;
    at += (size_t)n;
  }
  return (int)at;
}
