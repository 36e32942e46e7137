/* Process-wide event counters: what happened in this process, summed over
 * every connection, for the .prom file and for tests.
 *
 * Each connection's engine keeps its own counts (rr_engine_stats, which the
 * simulation reads per engine); a connection ends, its counts go with it.
 * These are the process's totals since load and never go back, which is what
 * a Prometheus counter must be and what a test needs to ask "did the
 * receiver refuse that write" without reading log wording.
 *
 * Counting is one relaxed atomic add: allowed anywhere, the data path
 * included (every counted event is rare next to a chunk write). */
#ifndef RERAIL_COMMON_COUNTERS_H
#define RERAIL_COMMON_COUNTERS_H
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef enum rr_counter {
  /* Peer input that broke the wire protocol, by kind (one family, label
   * kind; engine_internal.h's engine_violation_kind says what each is); each failed
   * the rail it came on over. */
  RR_CTR_VIOL_NO_RECEIVE = 0,     /* a write for no posted receive */
  RR_CTR_VIOL_CHUNK_INDEX,        /* a chunk index the receive cannot have */
  RR_CTR_VIOL_LENGTH,             /* a write of a length its place cannot have */
  RR_CTR_VIOL_DUPLICATE,          /* a chunk or eager message twice in one epoch */
  RR_CTR_VIOL_KEY,                /* a write with a key the receive does not have */
  RR_CTR_VIOL_ADDRESS,            /* a write to an address its chunk does not have */
  RR_CTR_VIOL_MALFORMED,          /* a message that does not decode */
  RR_CTR_VIOL_WINDOW,             /* a sequence number outside the receive window */
  RR_CTR_VIOL_CLAIM,              /* a placement claim that cannot be true */
  RR_CTR_VIOL_DIRECTION,          /* data or control the connection's role never receives */
  RR_CTR_VIOL_EPOCH,              /* a failure notice from a future epoch */
  RR_CTR_VIOL_OVERFLOW,           /* more early copies than the early buffer holds */
  RR_CTR_ROLLBACKS,               /* epochs started (receiver) or adopted (sender) */
  RR_CTR_CLOSES_OWED,             /* closes that gave up with something owed undelivered */
  RR_CTR_PARKED_SENDS,            /* eager sends parked (no receive with their tag) */
  RR_CTR_PLACED_SENDS,            /* sends completed on their writes' placement */
  RR_CTR_PLACED_CLAIMS,           /* sub-receives completed on a PLACED claim */
  RR_CTR_SPLIT_WRITES,            /* writes sent split for adaptive routing (plain bulk + write with immediate) */
  RR_CTR_DEMOTIONS,               /* rails demoted as degraded */
  RR_CTR_RAIL_RECONNECTS,         /* rails given a fresh transport endpoint */
  RR_CTR_CONNECT_START_OVERS,     /* connection attempts started over as new after an early COMMIT */
  /* Where connect()'s time goes (per connection, summed: a mean over
   * connects_total), and what it did with rails not up: what setting up
   * thousands of connections costs, bench/RESULTS.md §11. */
  RR_CTR_CONNECTS,                /* send comms connect() handed out */
  RR_CTR_CONNECT_MS_FIRST_RAIL,   /* ms: first call to a rail up (one family, label phase) */
  RR_CTR_CONNECT_MS_OTHER_RAILS,  /* ms: then to the set of rails decided */
  RR_CTR_CONNECT_MS_INSTALL,      /* ms: then to the comm handed out */
  RR_CTR_CONNECT_SETTLE_WAITS,    /* connections whose connect() held a rail up and waited for another */
  RR_CTR_CONNECT_RAILS_DEFERRED,  /* rails of a first plan not up when the connection went on */
  RR_CTR_CONNECT_DEFERRED_UP,     /* of those, reopened and installed since */
  RR_CTR_CONNECT_DEFERRED_MS,     /* ms those ran without that rail: handed out to installed, summed */
  RR_CTR_SETUP_CALL_US_CONNECT,   /* µs inside connect() calls, summed (one family, label call) */
  RR_CTR_SETUP_CALL_US_ACCEPT,    /* µs inside accept() calls, summed */
  RR_CTR_SETUP_CALLS_CONNECT,     /* connect() calls (one family, label call) */
  RR_CTR_SETUP_CALLS_ACCEPT,      /* accept() calls */
  RR_CTR_SETUP_EP_US_OPEN,        /* µs opening rails' endpoints for setup (one family, label step) */
  RR_CTR_SETUP_EP_US_CONNECT,     /* µs connecting them */
  RR_CTR_FAILOVERS,               /* health events: traffic moved off a rail */
  RR_CTR_FAILBACKS,               /* health events: traffic returned to a healed rail */
  RR_CTR_CONNECTION_ERRORS,       /* health events: a connection failed for good */
  RR_CTR_SETTINGS_REFUSED,        /* RERAIL_* values refused or matching nothing: a default used */
  /* Connections a listener refused, by reason (one family, label reason). */
  RR_CTR_REFUSED_PER_SOURCE,      /* evicted: a newer socket from its address, which held its cap */
  RR_CTR_REFUSED_CROWDED_OUT,     /* a stranger evicted to make room for a newer one */
  RR_CTR_REFUSED_NO_HANDSHAKE,    /* half a handshake message, then silence */
  RR_CTR_REFUSED_CLOSED,          /* the connector closed before completing the handshake */
  RR_CTR_REFUSED_NOT_RERAIL,      /* not a rerail peer (bad magic) */
  RR_CTR_REFUSED_SETUP_VERSION,   /* a rerail peer of another connection-setup version */
  RR_CTR_REFUSED_MALFORMED,       /* a malformed or unexpected handshake message */
  RR_CTR_REFUSED_WRONG_SECRET,    /* the peer does not hold the listener's handle */
  RR_CTR_REFUSED_STALE_RECONNECT, /* a reconnect for no live connection or rail, or older than its sockets */
  RR_CTR_REFUSED_RUNAWAY,         /* a reconnect generation beyond the rail's window */
  RR_CTR_REFUSED_OTHER,           /* the rest: device not offered, local failures, listener closed */
  /* Frames the TCP rail refused before they reached the engine, by kind
   * (one family, label kind); each failed its rail over. */
  RR_CTR_TCP_BAD_FLAGS,           /* a frame with unknown flags */
  RR_CTR_TCP_BAD_CONTROL_SIZE,    /* a control frame over the control message size */
  RR_CTR_TCP_BAD_DRAIN,           /* a drain marker with a payload */
  RR_CTR_TCP_BAD_TYPE,            /* an unknown frame type */
  /* What the verbs rail did: facts an operator asks about (and the lab
   * tests decide on) that were only in the log. */
  RR_CTR_VERBS_LIB_UNUSABLE,      /* libibverbs could not be loaded (at most 1: tried once) */
  RR_CTR_VERBS_DEVICES_OPENED,    /* RDMA ports opened as devices on the verbs rail */
  RR_CTR_VERBS_ENDPOINTS_CONNECTED, /* verbs endpoints connected to their peer */
  RR_CTR_VERBS_QPS_CONNECTED,     /* their queue pairs (RERAIL_IB_QPS_PER_RAIL each, when both ends agree) */
  RR_CTR_VERBS_REGISTRATIONS,     /* buffers registered with a NIC (ibv_reg_mr and its variants) */
  RR_CTR_VERBS_REGISTRATIONS_AFTER_DOWN, /* of those, registered after a NIC or rail of the process went down */
  RR_CTR_VERBS_FLUSH_READS,       /* flush reads (RDMA reads behind a GPU receive) completed */
  RR_CTR_VERBS_STRAY_COMPLETIONS, /* completions on an endpoint's CQ that named none of its QPs */
  RR_CTR_FLUSH_REQUESTS,          /* flush requests handed to NCCL (receives into GPU memory) */
  /* Probes of demoted rails (engine_gray.c), by verdict (one family,
   * label result), and what the completed ones moved: what decides a
   * restore, for an operator and for the lab tests. */
  RR_CTR_PROBES_HEALTHY,          /* at the restore bar: starts or continues the healthy run */
  RR_CTR_PROBES_BETWEEN,          /* between the two bars: neither starts nor breaks it */
  RR_CTR_PROBES_SLOW,             /* under the demotion bar, lossy or too late: breaks it */
  RR_CTR_PROBES_TIMED_OUT,        /* not done within its timeout: breaks it */
  RR_CTR_PROBE_BYTES,             /* bytes of completed probes */
  RR_CTR_PROBE_RATE_KBPS,         /* each one's rate (post to acknowledgement), kB/s, summed */
  RR_CTR_PROBE_REFERENCE_KBPS,    /* the reference each completed probe was judged against, kB/s, summed */
  /* What keeps connections judged for silence (docs/failover.md): control
   * requests rails post for it, by kind (one family, label kind), and the
   * background thread's drives of connections. Each grows with the
   * connections in use and the time, not with the traffic: what they cost
   * at thousands of connections is bench/RESULTS.md §11's. */
  RR_CTR_CONTROL_PROBES,          /* PROBE messages: a rail silent δ/4, or down or recovering */
  RR_CTR_CONTROL_SIGNALS,         /* verbs: a signalled credit word behind a tail someone asked about */
  RR_CTR_CONTROL_CREDITS,         /* verbs: a credit word with no message to carry the count */
  RR_CTR_BACKGROUND_DRIVES,       /* connections driven by the background thread (progress and judge) */
  RR_CTR_TEST_FORGED_WRITES,      /* writes forged by RERAIL_TEST_FORGE_WRITE (tests only) */
  RR_CTR_COUNT
} rr_counter;

typedef struct rr_counter_info {
  const char *name; /* the .prom name without the rerail_ prefix, e.g. "rollbacks_total" */
  const char *help; /* the .prom HELP text (of the family: same on every member) */
  /* A family's members follow each other in the enum, with one label told
   * apart by value (e.g. reason="wrong_secret"); NULL for a plain counter. */
  const char *label, *value;
  /* 0: the .prom file already has the family under this name per NIC or
   * peer (from health events), whose sum this is; rr_counters_format() still
   * gives it, for tests that run without telemetry. */
  int in_prom;
} rr_counter_info;

extern _Atomic uint64_t rr_counter_values[RR_CTR_COUNT];

static inline void rr_counter_inc(rr_counter c) {
  atomic_fetch_add_explicit(&rr_counter_values[c], 1, memory_order_relaxed);
}

static inline void rr_counter_add(rr_counter c, uint64_t n) {
  atomic_fetch_add_explicit(&rr_counter_values[c], n, memory_order_relaxed);
}

uint64_t rr_counter_get(rr_counter c);
const rr_counter_info *rr_counter_info_of(rr_counter c);

/* Counter c's value as text: a count as an integer; a time, which the
 * engine keeps in milliseconds or microseconds (rr_counters.c says which),
 * in seconds with as many decimals as its unit has, as its "_seconds_total"
 * name says (Prometheus: base units, no abbreviations). Returns what
 * snprintf returns. */
int rr_counter_format_value(char *buf, size_t len, rr_counter c);

/* Every counter as "name value\n" lines, in enum order; a family member's
 * name is "name{label=value}" (no quotes, no spaces). Returns the length written, or -1 when buf is too small (it
 * then holds nothing useful). */
int rr_counters_format(char *buf, size_t len);

#endif
