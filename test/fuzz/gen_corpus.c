/* Writes the fuzzers' seed corpora with rerail's real encoders: valid
 * handles from rr_handle_encode, valid tables from the real writer (copied
 * while its rows are claimed and filled), and a few edge cases derived from
 * them, and scripts for the verbs ring's reader. Usage: fuzz_gen_corpus
 * <corpus dir> (creates <dir>/handle, <dir>/hello, <dir>/health_table and
 * <dir>/verbs_ring). Rerun and commit its output when a format changes. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "handle.h"
#include "rail.h"
#include "setup_wire.h"
#include "verbs_addr.h"
#include "rr_health_bus.h"
#include "rr_health_table.h"
#include "rr_health_table_internal.h"

static const char *out_dir;

static void put(const char *target, const char *name, const void *buf, size_t len) {
  char p[4096];
  snprintf(p, sizeof p, "%s/%s", out_dir, target);
  if (mkdir(p, 0755) != 0 && errno != EEXIST) exit(1);
  snprintf(p, sizeof p, "%s/%s/%s", out_dir, target, name);
  FILE *f = fopen(p, "wb");
  if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
    fprintf(stderr, "cannot write %s\n", p);
    exit(1);
  }
}

static struct sockaddr_storage v4(const char *a) {
  struct sockaddr_storage s;
  memset(&s, 0, sizeof s);
  ((struct sockaddr_in *)&s)->sin_family = AF_INET;
  inet_pton(AF_INET, a, &((struct sockaddr_in *)&s)->sin_addr);
  return s;
}

static struct sockaddr_storage v6(const char *a) {
  struct sockaddr_storage s;
  memset(&s, 0, sizeof s);
  ((struct sockaddr_in6 *)&s)->sin6_family = AF_INET6;
  inet_pton(AF_INET6, a, &((struct sockaddr_in6 *)&s)->sin6_addr);
  return s;
}

static void handles(void) {
  unsigned char h[RR_NET_HANDLE_SIZE];
  uint8_t secret[RR_HS_SECRET_LEN];
  for (int i = 0; i < RR_HS_SECRET_LEN; i++) secret[i] = (uint8_t)(0x11 * i + 3);
  const uint8_t process[RR_HANDLE_PROCESS_LEN] = {0x5e, 0x11, 0x0c, 0x7a, 0x2b, 0x01};
  rr_handle_entry one[1] = {{.addr = v4("10.77.0.1"), .dev = 0, .own_ip = 1}};
  if (rr_handle_encode(one, 1, 40123, secret, process, h) != RR_OK) exit(1);
  put("handle", "valid-ipv4-1addr", h, sizeof h);
  /* four RDMA devices set up over one out-of-band address, one TCP device */
  rr_handle_entry five[5] = {{.addr = v6("fd00::1"), .dev = 1}, {.addr = v6("fd00::1"), .dev = 0},
                             {.addr = v6("fd00::1"), .dev = 2}, {.addr = v6("fd00::1"), .dev = 3},
                             {.addr = v6("fd00::4"), .dev = 4, .own_ip = 1}};
  if (rr_handle_encode(five, 5, 65535, secret, process, h) != RR_OK) exit(1);
  put("handle", "valid-ipv6-5addrs", h, sizeof h);
  unsigned char bad[RR_NET_HANDLE_SIZE];
  memcpy(bad, h, sizeof bad);
  bad[0] ^= 0xff;
  put("handle", "bad-magic", bad, sizeof bad);
  memcpy(bad, h, sizeof bad);
  bad[4] = 1; /* version */
  put("handle", "bad-version", bad, sizeof bad);
  memcpy(bad, h, sizeof bad);
  bad[5] = 9; /* naddrs above the maximum */
  put("handle", "too-many-addrs", bad, sizeof bad);
  memcpy(bad, h, sizeof bad);
  bad[107] = 200; /* an entry's device out of range */
  put("handle", "bad-entry-dev", bad, sizeof bad);
  memcpy(bad, h, sizeof bad);
  bad[40] = bad[41] = 0; /* port 0 */
  put("handle", "port-zero", bad, sizeof bad);
  memcpy(bad, h, sizeof bad);
  bad[6] = 5; /* unknown family */
  put("handle", "bad-family", bad, sizeof bad);
  put("handle", "short", h, 16);
}

/* Connection-setup messages, each behind the byte fuzz_hello.c reads to pick
 * its decoder (0 HELLO, 1 CHALLENGE, 2 PROOF, 3 ACCEPT, 4 COMMIT). */
static void put_msg(const char *name, uint8_t which, const uint8_t *m, size_t len) {
  uint8_t buf[1 + RR_HS_MAX_LEN];
  buf[0] = which;
  memcpy(buf + 1, m, len);
  put("hello", name, buf, 1 + len);
}

static void hellos(void) {
  uint8_t m[RR_HS_MAX_LEN];
  rr_hs_hello h = {.conn_id = 0x0123456789abcdefull, .rail = 1, .stream = 0, .nstreams = 2,
                   .flags = RR_HS_FLAG_RECONNECT, .chunk_size = 128 << 10, .generation = 3, .dev = 1};
  size_t n = rr_hs_hello_encode(&h, m);
  put_msg("hello-reconnect", 0, m, n);
  put_msg("hello-truncated", 0, m, n / 2);
  h.flags = 0, h.generation = 0;
  put_msg("hello-first", 0, m, rr_hs_hello_encode(&h, m));
  rr_hs_challenge c = {.gen_floor = 7};
  memset(c.nonce, 0x5a, sizeof c.nonce);
  put_msg("challenge", 1, m, rr_hs_challenge_encode(&c, m));
  rr_hs_proof p = {.blob_len = 3, .blob = {1, 2, 3}};
  put_msg("proof-blob", 2, m, rr_hs_proof_encode(RR_HS_PROOF, &p, m));
  p.blob_len = 0;
  put_msg("accept-empty", 3, m, rr_hs_proof_encode(RR_HS_ACCEPT, &p, m));
  /* A verbs endpoint's address as the blob (RoCE, QP 0x1234, MTU 1024). */
  rr_verbs_addr va = {.qpn = {0x1234}, .nqps = 1, .ring_slots = 128, .psn = 0x56, .lid = 0, .mtu = IBV_MTU_1024, .link_layer = IBV_LINK_LAYER_ETHERNET};
  va.gid[10] = va.gid[11] = 0xff;
  va.gid[12] = 10, va.gid[15] = 1;
  p.blob_len = RR_VERBS_ADDR_LEN;
  rr_verbs_addr_encode(&va, p.blob);
  put_msg("accept-verbs", 3, m, rr_hs_proof_encode(RR_HS_ACCEPT, &p, m));
  rr_hs_commit cm = {.rails = 0x3};
  put_msg("commit", 4, m, rr_hs_commit_encode(&cm, m));
  cm.rails = 0x2, cm.later = 0x5, cm.later_addr[0] = 0, cm.later_addr[2] = 2;
  put_msg("commit-later", 4, m, rr_hs_commit_encode(&cm, m));
}

static void table_file(const char *path, unsigned char **buf, size_t *len) {
  struct stat st;
  int fd = open(path, O_RDONLY);
  if (fd < 0 || fstat(fd, &st) != 0) exit(1);
  *len = (size_t)st.st_size;
  *buf = malloc(*len);
  if (!*buf || pread(fd, *buf, *len, 0) != (ssize_t)*len) exit(1);
  close(fd);
}

static void tables(void) {
  char dir[] = "/tmp/rr-gen-corpus-XXXXXX", path[64];
  if (!mkdtemp(dir)) exit(1);
  snprintf(path, sizeof path, "%s/health", dir);
  rr_ht_writer_opts o = {.nic_rows = 2, .peer_rows = 2, .group = ""};
  rr_ht_writer *w = NULL;
  if (rr_health_table_open_writer(path, &o, &w, NULL) != RR_OK) exit(1);
  unsigned char *buf;
  size_t len;
  table_file(path, &buf, &len);
  put("health_table", "empty-2x2", buf, len);
  free(buf);

  /* Rows of every kind, filled by the real writer. */
  rr_health_table_claim(w, 0, "eth0");
  rr_health_table_claim(w, 1, "eth1");
  rr_health_table_figures(w, 0, RR_HT_TX, 12500000000ull, 4000, 9000);
  rr_health_table_figures(w, 1, RR_HT_RX, 11000000000ull, 4500, 9500);
  rr_health_event ev;
  memset(&ev, 0, sizeof ev);
  ev.kind = RR_HEV_RAIL_STATE;
  ev.dev = 1;
  ev.state = RR_LINK_DOWN;
  snprintf(ev.ifname, sizeof ev.ifname, "eth1");
  snprintf(ev.peer, sizeof ev.peer, "10.77.0.2");
  snprintf(ev.reason, sizeof ev.reason, "send rail1: connection reset");
  rr_health_table_event(w, &ev);
  table_file(path, &buf, &len);
  put("health_table", "rows-2x2", buf, len);

  /* Edge cases from it: a row caught mid-write (odd seq), a row whose
   * strings fill their arrays, an impossible state, cut short, header only,
   * another layout version, not a table at all. */
  unsigned char *edge = malloc(len);
  rr_ht_header h;
  memcpy(&h, buf, sizeof h);
  memcpy(edge, buf, len);
  edge[h.nic_offset] |= 1;
  put("health_table", "row-mid-write", edge, len);
  memcpy(edge, buf, len);
  memset(edge + h.nic_offset + offsetof(rr_ht_nic_row, ifname), 'x', 16);
  memset(edge + h.peer_offset + offsetof(rr_ht_peer_row, peer), 'y', 64 + 96);
  put("health_table", "unterminated-strings", edge, len);
  memcpy(edge, buf, len);
  edge[h.nic_offset + offsetof(rr_ht_nic_row, state)] = 9;
  put("health_table", "bad-state", edge, len);
  put("health_table", "cut-short", buf, len / 2);
  put("health_table", "header-only", buf, sizeof h);
  memcpy(edge, buf, len);
  ((rr_ht_header *)edge)->version = 2;
  ((rr_ht_header *)edge)->checksum = rr_ht_header_checksum((rr_ht_header *)edge);
  put("health_table", "other-version", edge, len);
  put("health_table", "foreign", "not a health table\n", 19);
  free(edge);
  free(buf);
  rr_health_table_close_writer(w);
  unlink(path);
  rmdir(dir);
}

/* Scripts for fuzz_verbs_ring (its header, then steps; see that file). */
typedef struct ring_script {
  uint8_t b[4096];
  size_t n;
} ring_script;

enum { RING_PEER_MSG, RING_PEER_BYTES, RING_READ, RING_DELIVER_OP, RING_SEND, RING_CREDIT_WORD };

static void rs8(ring_script *s, uint32_t v) { s->b[s->n++] = (uint8_t)v; }
static void rs16(ring_script *s, uint32_t v) { rs8(s, v), rs8(s, v >> 8); }
static void rs32(ring_script *s, uint32_t v) { rs16(s, v), rs16(s, v >> 16); }

static void ring_header(ring_script *s, uint32_t rx_msgs, uint32_t rx_ops, uint32_t tx_acked, uint32_t tx_out) {
  s->n = 0;
  rs32(s, rx_msgs);
  rs32(s, rx_ops);
  rs8(s, 0);  /* rx_last_ops = rx_ops */
  rs8(s, 0);  /* one QP */
  rs16(s, tx_acked);
  rs8(s, tx_out);
}

/* Message number rx_msgs + k with ops and credit this far from the reader's counts. */
static void ring_msg(ring_script *s, uint32_t k, int8_t dops, int8_t dcredit, uint32_t len) {
  rs8(s, RING_PEER_MSG);
  rs8(s, k);
  rs8(s, (uint8_t)dops);
  rs8(s, (uint8_t)dcredit);
  rs16(s, len);
  for (uint32_t i = 0; i < len; i++) rs8(s, 0x40 + i % 26);
}

static void ring_scripts(void) {
  ring_script s;
  ring_header(&s, 0, 0, 0, 0);
  ring_msg(&s, 0, 0, 0, 12);
  rs8(&s, RING_READ);
  put("verbs_ring", "one-message", s.b, s.n);

  ring_header(&s, 0, 5, 0, 0);
  ring_msg(&s, 0, 1, 0, 8); /* behind a write not yet delivered */
  rs8(&s, RING_READ);
  rs8(&s, RING_DELIVER_OP);
  rs8(&s, RING_READ);
  put("verbs_ring", "held-behind-write", s.b, s.n);

  ring_header(&s, 0xfffffffdu, 0, 0, 0); /* the stamps wrap past 0xffffffff */
  for (uint32_t k = 0; k < 4; k++) ring_msg(&s, k, 0, 0, 4);
  rs8(&s, RING_READ);
  put("verbs_ring", "stamp-wrap", s.b, s.n);

  ring_header(&s, 1000, 0, 300, 64); /* credits back in messages and in the word */
  ring_msg(&s, 0, 0, 10, 0);
  ring_msg(&s, 1, 0, 40, 0);
  rs8(&s, RING_READ);
  rs8(&s, RING_SEND);
  rs8(&s, RING_CREDIT_WORD);
  rs8(&s, 20);
  put("verbs_ring", "credits", s.b, s.n);

  ring_header(&s, 0, 0, 0, 0);
  ring_msg(&s, 0, 0, 0, RR_RAIL_CTRL_MAX);
  ring_msg(&s, 1, 0, 0, 1);
  rs8(&s, RING_READ);
  put("verbs_ring", "largest-body", s.b, s.n);

  ring_header(&s, 0, 0, 0, 0); /* a length field over the limit, written over a good message */
  ring_msg(&s, 0, 0, 0, 4);
  rs8(&s, RING_PEER_BYTES);
  rs16(&s, 4);
  rs8(&s, 0);
  rs8(&s, 4);
  rs32(&s, RR_RAIL_CTRL_MAX + 1);
  rs8(&s, RING_READ);
  put("verbs_ring", "forged-length", s.b, s.n);

  ring_header(&s, 7, 0, 0, 0);
  for (uint32_t k = 0; k < 130; k++) ring_msg(&s, k, 0, 0, k % 5); /* a lap and more: the peer overruns */
  for (int k = 0; k < 40; k++) rs8(&s, RING_READ);
  put("verbs_ring", "overrun-lap", s.b, s.n);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
    return 2;
  }
  out_dir = argv[1];
  handles();
  hellos();
  tables();
  ring_scripts();
  return 0;
}
