/* rerail-tel-writer: a stand-in for a rerail job, for the telemetry
 * integration tests. It opens recorders as the engine does, records
 * synthetic traffic in real time (so windowed throughput and latency are
 * real figures) and reports health events as the engine would, while the
 * exporter writes its files into RERAIL_TELEMETRY_DIR.
 *
 *   rerail-tel-writer [--seconds S] [--rails R] [--rate MBPS] [--events N]
 *                     [--event-interval-ms MS]
 *
 * --rate: MB/s per rail (1 MB requests at that pace, latency 1 request
 * time). --events N: N health events, one every --event-interval-ms, each
 * with "ev <i>" as its reason; the first four are a NIC going down, a rail
 * state, a failover (stall 12.5 ms) and a fail-back, the rest rail states.
 * Prints "ready" once the first metrics file exists, exits after --seconds
 * (the metrics file then goes away, as with any rerail job). */
#include "rr_clock.h"
#include "rr_health_bus.h"
#include "rr_telemetry.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void sleep_ns(uint64_t ns) {
  struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull), .tv_nsec = (long)(ns % 1000000000ull)};
  nanosleep(&ts, NULL);
}

static void event(int i) {
  rr_health_event ev = {.dev = 0, .to_dev = -1, .state = RR_LINK_UP};
  snprintf(ev.peer, sizeof ev.peer, "10.77.0.2");
  snprintf(ev.ifname, sizeof ev.ifname, "rail0");
  snprintf(ev.reason, sizeof ev.reason, "ev %d", i);
  switch (i) {
  case 0:
    ev.kind = RR_HEV_NIC_STATE;
    ev.state = RR_LINK_DOWN;
    ev.peer[0] = '\0';
    break;
  case 1:
    ev.kind = RR_HEV_RAIL_STATE;
    ev.state = RR_LINK_DOWN;
    break;
  case 2:
    ev.kind = RR_HEV_FAILOVER;
    ev.to_dev = 1;
    snprintf(ev.to_ifname, sizeof ev.to_ifname, "rail1");
    ev.stall_ns = 12500000;
    break;
  case 3:
    ev.kind = RR_HEV_FAILBACK;
    ev.dev = 1;
    ev.to_dev = 0;
    snprintf(ev.ifname, sizeof ev.ifname, "rail1");
    snprintf(ev.to_ifname, sizeof ev.to_ifname, "rail0");
    break;
  default:
    ev.kind = RR_HEV_RAIL_STATE;
    ev.state = i % 2 ? RR_LINK_RECOVERING : RR_LINK_UP;
  }
  rr_health_report(&ev);
}

int main(int argc, char **argv) {
  double seconds = 5, rate = 100;
  int rails = 2, nevents = 4;
  long ev_ms = 100;
  static const struct option opts[] = {{"seconds", 1, 0, 's'}, {"rails", 1, 0, 'r'}, {"rate", 1, 0, 'm'},
                                       {"events", 1, 0, 'e'},  {"event-interval-ms", 1, 0, 'i'}, {0, 0, 0, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 's': seconds = atof(optarg); break;
    case 'r': rails = atoi(optarg); break;
    case 'm': rate = atof(optarg); break;
    case 'e': nevents = atoi(optarg); break;
    case 'i': ev_ms = atol(optarg); break;
    default:
      fprintf(stderr, "usage: rerail-tel-writer [--seconds S] [--rails R] [--rate MBPS] [--events N] "
                      "[--event-interval-ms MS]\n");
      return 2;
    }
  }
  if (rails < 1 || rails > 8 || rate <= 0) return 2;
  rr_tel_rail *tx[8], *rx[8];
  for (int r = 0; r < rails; r++) {
    char nic[16];
    snprintf(nic, sizeof nic, "rail%d", r);
    tx[r] = rr_tel_rail_open(r, nic, "10.77.0.2", r, RR_TEL_TX);
    rx[r] = rr_tel_rail_open(r, nic, "10.77.0.2", r, RR_TEL_RX);
    if (!tx[r] || !rx[r]) {
      fprintf(stderr, "rerail-tel-writer: telemetry is off (set RERAIL_TELEMETRY_DIR)\n");
      return 1;
    }
  }
  const uint32_t req = 1000000;
  uint64_t per_req = (uint64_t)(req / (rate * 1e6) * 1e9);
  uint64_t start = rr_now_ns(), end = start + (uint64_t)(seconds * 1e9), next_ev = start;
  uint64_t t = start;
  int ready = 0, ev = 0;
  while (rr_now_ns() < end) {
    uint64_t now = rr_now_ns();
    /* Requests back to back at the rate, completed up to now. */
    while (t + per_req <= now) {
      for (int r = 0; r < rails; r++) {
        rr_tel_record(tx[r], t, t + per_req, req);
        rr_tel_record(rx[r], t, t + per_req, req);
      }
      t += per_req;
    }
    if (ev < nevents && now >= next_ev) {
      event(ev++);
      next_ev = now + (uint64_t)ev_ms * 1000000ull;
    }
    if (!ready && rr_tel_flush() == RR_OK) {
      printf("ready\n");
      fflush(stdout);
      ready = 1;
    }
    sleep_ns(2000000);
  }
  rr_tel_flush();
  for (int r = 0; r < rails; r++) {
    rr_tel_rail_close(tx[r]);
    rr_tel_rail_close(rx[r]);
  }
  return 0;
}
