/* What serves a NIC row of the health table, for `rerail status`: the table
 * has no field for it (its layout is versioned), the telemetry file of the
 * row's process does (rerail_nic_info, docs/telemetry.md). */
#ifndef RERAIL_TOOLS_STATUS_TRANSPORT_H
#define RERAIL_TOOLS_STATUS_TRANSPORT_H
#include <stdint.h>

typedef struct status_transport {
  char transport[8];     /* "verbs", "tcp" */
  char rdma_device[32];  /* "rxe0"; "" on TCP */
  int rdma_port;         /* 0 on TCP */
} status_transport;

/* Fills *out and returns 1 when process pid's .prom file in dir names nic's
 * transport; 0 when it does not (telemetry off, another directory, an older
 * plugin): the caller shows it as unknown. */
int status_transport_of(const char *dir, uint32_t pid, const char *nic, status_transport *out);

/* The value of label key in a Prometheus sample's braces [l, end) into buf
 * (at most len - 1 bytes, up to the closing quote); 0 when absent, cut
 * short or malformed. */
#include <stddef.h>
int status_prom_label(const char *l, const char *end, const char *key, char *buf, size_t len);

#endif
