/* Telemetry recorder: placeholder until the exporter lands. Recording is off. */
#include "rr_telemetry.h"

#include <stddef.h>

rr_tel_rail *rr_tel_rail_open(int dev, const char *ifname, const char *peer, int rail, int dir) {
  (void)dev, (void)ifname, (void)peer, (void)rail, (void)dir;
  return NULL;
}

void rr_tel_rail_close(rr_tel_rail *t) { (void)t; }

void rr_tel_record_slow(rr_tel_rail *t, uint64_t post_ns, uint64_t done_ns, uint32_t bytes) {
  (void)t, (void)post_ns, (void)done_ns, (void)bytes;
}
