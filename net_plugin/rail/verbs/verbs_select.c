#include "verbs_select.h"
#include "rr_log.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

rr_status rr_hca_filter_parse(const char *spec, rr_hca_filter *f) {
  memset(f, 0, sizeof *f);
  if (!spec) return RR_OK;
  const char *p = spec;
  if (*p == '^') f->exclude = 1, p++;
  if (*p == '=') f->exact = 1, p++;
  rr_status s = RR_OK;
  while (*p) {
    const char *end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    const char *colon = memchr(p, ':', n);
    size_t name_len = colon ? (size_t)(colon - p) : n;
    int port = -1;
    int ok = name_len > 0 && name_len < RR_HCA_NAME_MAX;
    if (ok && colon) {
      /* A port number: 1..255 digits only (ports are 8-bit in verbs). */
      size_t dl = n - name_len - 1;
      ok = dl > 0 && dl <= 3;
      for (size_t i = 0; ok && i < dl; i++) ok = isdigit((unsigned char)colon[1 + i]);
      if (ok) {
        char num[4] = {0};
        memcpy(num, colon + 1, dl);
        port = atoi(num);
        ok = port >= 1 && port <= 255;
      }
    }
    if (ok && f->count == RR_HCA_MAX_ENTRIES) ok = 0;
    if (ok) {
      memcpy(f->entry[f->count].name, p, name_len);
      f->entry[f->count].name[name_len] = '\0';
      f->entry[f->count].port = port;
      f->count++;
    } else if (n > 0) {
      RR_WARN("RERAIL_IB_HCA: ignoring entry \"%.*s\" (want NAME or NAME:PORT, at most %d entries)",
              (int)(n > 80 ? 80 : n), p, RR_HCA_MAX_ENTRIES);
      s = RR_ERR_INVALID;
    }
    p += n;
    if (*p == ',') p++;
  }
  return s;
}

int rr_hca_filter_match(const rr_hca_filter *f, const char *dev, int port) {
  /* An empty list selects everything, "^" with nothing after it too. */
  if (f->count == 0) return 1;
  int hit = 0;
  for (int i = 0; i < f->count && !hit; i++) {
    const char *name = f->entry[i].name;
    int name_hit = f->exact ? !strcmp(dev, name) : !strncmp(dev, name, strlen(name));
    hit = name_hit && (f->entry[i].port == -1 || f->entry[i].port == port);
  }
  return f->exclude ? !hit : hit;
}

int rr_gid_type_parse(const char *text) {
  if (!text) return RR_GID_TYPE_UNKNOWN;
  size_t n = strcspn(text, "\n");
  if (n == 10 && !strncmp(text, "IB/RoCE v1", n)) return RR_GID_TYPE_IB_ROCE_V1;
  if (n == 7 && !strncmp(text, "RoCE v2", n)) return RR_GID_TYPE_ROCE_V2;
  return RR_GID_TYPE_UNKNOWN;
}

int rr_gid_is_ipv4(const uint8_t raw[16]) {
  static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return !memcmp(raw, prefix, sizeof prefix);
}

static int gid_empty(const uint8_t raw[16]) {
  for (int i = 0; i < 16; i++)
    if (raw[i]) return 0;
  return 1;
}

static int gid_link_local(const uint8_t raw[16]) { return raw[0] == 0xfe && (raw[1] & 0xc0) == 0x80; }

/* Preference of one entry, higher is better; 0 = unusable. NCCL's defaults
 * (NCCL_IB_ADDR_FAMILY=AF_INET, NCCL_IB_ROCE_VERSION_NUM=2): the address family first, then
 * the RoCE version; link-local GIDs only when nothing else exists. A type sysfs could not
 * tell ranks below the known ones but stays usable. */
static int gid_rank(const rr_gid_entry *e) {
  if (gid_empty(e->raw)) return 0;
  int v2 = e->type == RR_GID_TYPE_ROCE_V2, v1 = e->type == RR_GID_TYPE_IB_ROCE_V1;
  if (rr_gid_is_ipv4(e->raw)) return v2 ? 6 : v1 ? 5 : 4;
  if (gid_link_local(e->raw)) return 1;
  return v2 ? 3 : 2;
}

int rr_gid_choose(const rr_gid_entry *tbl, int n, int override) {
  if (override >= 0) {
    if (override < n && !gid_empty(tbl[override].raw)) return override;
    RR_WARN("RERAIL_IB_GID_INDEX=%d names no GID of this port (table of %d); choosing one", override,
            n);
  }
  int best = -1, best_rank = 0;
  for (int i = 0; i < n; i++) {
    int r = gid_rank(&tbl[i]);
    if (r > best_rank) best = i, best_rank = r;
  }
  return best;
}

int rr_ib_port_speed_mbps(unsigned active_speed, unsigned active_width) {
  /* Per-lane data rates (Mbps) of the IB speed codes: SDR, DDR, QDR, FDR10, FDR, EDR, HDR, NDR,
   * XDR (the codes are bit flags). */
  static const struct { unsigned code; int mbps; } speeds[] = {
      {1, 2500}, {2, 5000}, {4, 10000}, {8, 10000}, {16, 14000},
      {32, 25000}, {64, 50000}, {128, 100000}, {256, 200000}};
  static const struct { unsigned code; int lanes; } widths[] = {
      {1, 1}, {2, 4}, {4, 8}, {8, 12}, {16, 2}};
  int mbps = 0, lanes = 0;
  for (size_t i = 0; i < sizeof speeds / sizeof speeds[0]; i++)
    if (speeds[i].code == active_speed) mbps = speeds[i].mbps;
  for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++)
    if (widths[i].code == active_width) lanes = widths[i].lanes;
  return mbps * lanes;
}
