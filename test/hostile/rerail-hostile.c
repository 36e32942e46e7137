/* rerail-hostile: attacks a rerail listener the way a hostile network or a
 * hostile peer would, and reports what the listener did about it. Used by
 * test/integration/hostile_peers.sh while real traffic runs.
 *
 * usage: rerail-hostile --handle FILE [--addr I] [--src A[,B...]] ATTACK [ARGS]
 *   FILE      a harness handle file (test/harness/h_rdv.c: a "handle <hex>" line)
 *   --addr I  which of the handle's addresses to attack (default 0)
 *   --src     source addresses to bind, used in turn (default: the kernel's choice)
 *
 * Unauthenticated attacks (no secret needed):
 *   idle N HOLD_S MAX   open N connections and send nothing; after HOLD_S s
 *                       at most MAX may still be open (the listener holds
 *                       the newest up to its per-source cap, without a clock)
 *   garbage             random bytes instead of a hello
 *   truncated           half a hello, then silence
 *   oldversion          a hello of another protocol version
 *   wrong-secret        the whole handshake with a secret one bit off
 * Authenticated (holds the handle's secret, as a peer that read it would):
 *   runaway CONN RAIL   reopen RAIL of connection CONN (hex id) with
 *                       generation 0xFFFFFFFF
 *   frame CONN RAIL KIND  reopen RAIL of CONN with a valid generation, then
 *                       send forged TCP frames of KIND: key (writes with
 *                       unknown keys), outside (writes far outside any
 *                       receive), eager (eager writes naming a receive
 *                       far past the window the sender may assume), type,
 *                       flags, ctrl (oversized), drainlen (a drain with a
 *                       payload), truncated (half a header)
 *
 * Prints one "RESULT attack=... ok=0|1 ..." line; exits 0 when the listener
 * behaved (refused, dropped in time, or failed only the forged rail). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "handle.h"
#include "setup_wire.h"
#include "tcp_frame.h"

static rr_peer_addrs peer;
static int addr_index;
static struct sockaddr_storage srcs[8];
static int nsrcs, next_src;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int load_handle(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[1024];
  uint8_t h[RR_NET_HANDLE_SIZE] = {0};
  int got = 0;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "handle ", 7)) {
      for (int i = 0; i < RR_NET_HANDLE_SIZE; i++) {
        unsigned v;
        if (sscanf(line + 7 + 2 * i, "%2x", &v) != 1) break;
        h[i] = (uint8_t)v;
        got = i + 1;
      }
    }
  fclose(f);
  const char *why = NULL;
  if (got != RR_NET_HANDLE_SIZE || rr_handle_parse(h, &peer, &why) != RR_OK) {
    fprintf(stderr, "rerail-hostile: %s is not a usable handle file (%s)\n", path, why ? why : "short");
    return -1;
  }
  return 0;
}

/* A connected, blocking socket to the attacked address, or -1. nonblock:
 * leave it non-blocking and in progress (for floods). */
static int dial(int nonblock) {
  const struct sockaddr_storage *dst = &peer.addrs[addr_index];
  int fd = socket(dst->ss_family, SOCK_STREAM | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0), 0);
  if (fd < 0) return -1;
  if (nsrcs) {
    const struct sockaddr_storage *s = &srcs[next_src++ % nsrcs];
    socklen_t l = s->ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    if (bind(fd, (const struct sockaddr *)s, l) != 0) {
      close(fd);
      return -1;
    }
  }
  if (connect(fd, (const struct sockaddr *)dst, peer.addrlens[addr_index]) != 0 && errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  if (!nonblock) {
    struct timeval tv = {.tv_sec = 3};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  return fd;
}

/* Seconds until the peer closes fd (EOF or reset), or -1 after limit_s
 * (bytes it sends meanwhile are read and dropped). */
static double wait_closed(int fd, double limit_s) {
  double t0 = now_s();
  for (;;) {
    double left = limit_s - (now_s() - t0);
    if (left <= 0) return -1;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, (int)(left * 1000) + 1) <= 0) continue;
    char buf[4096];
    ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return now_s() - t0;
  }
}

static int send_full(int fd, const void *buf, size_t len) {
  return send(fd, buf, len, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -1;
}

static int recv_full(int fd, void *buf, size_t len) {
  size_t got = 0;
  while (got < len) {
    ssize_t n = recv(fd, (char *)buf + got, len - got, 0);
    if (n <= 0) return -1;
    got += (size_t)n;
  }
  return 0;
}

static int result(const char *attack, int ok, const char *fmt, const char *detail) {
  printf("RESULT attack=%s ok=%d %s\n", attack, ok, detail ? detail : "");
  (void)fmt;
  return ok ? 0 : 1;
}

static rr_hs_hello make_hello(uint64_t conn, int rail, uint32_t gen) {
  /* The listener device the attacked handle entry names, as a peer holding
   * the handle would send it (the listener checks it against the address). */
  rr_hs_hello h = {.conn_id = conn, .rail = (uint8_t)rail, .stream = 0, .nstreams = 1,
                   .flags = gen ? RR_HS_FLAG_RECONNECT : 0, .chunk_size = 128 << 10, .generation = gen,
                   .dev = peer.dev[addr_index]};
  rr_hs_random(h.nonce, sizeof h.nonce);
  return h;
}

/* HELLO out, CHALLENGE in. 0 with the challenge; -1 when the listener closed. */
static int hello_challenge(int fd, const rr_hs_hello *h, uint8_t hello[RR_HS_HELLO_LEN], rr_hs_challenge *ch) {
  rr_hs_hello_encode(h, hello);
  uint8_t in[RR_HS_CHALLENGE_LEN];
  size_t need;
  const char *why;
  if (send_full(fd, hello, RR_HS_HELLO_LEN) || recv_full(fd, in, sizeof in)) return -1;
  return rr_hs_challenge_decode(in, sizeof in, ch, &need, &why) == RR_OK ? 0 : -1;
}

static void send_proof(int fd, const uint8_t *secret, const uint8_t hello[RR_HS_HELLO_LEN],
                       const rr_hs_challenge *ch) {
  rr_hs_proof p = {.blob_len = 0};
  rr_hs_mac_blob(RR_HS_PROOF, secret, hello, ch->nonce, NULL, 0, p.mac);
  uint8_t out[RR_HS_MAX_LEN];
  send_full(fd, out, rr_hs_proof_encode(RR_HS_PROOF, &p, out));
}

static int attack_idle(int n, double hold, int max_held) {
  struct rlimit rl = {.rlim_cur = (rlim_t)n + 64, .rlim_max = (rlim_t)n + 64};
  setrlimit(RLIMIT_NOFILE, &rl);
  int *fds = calloc((size_t)n, sizeof *fds);
  double *closed = calloc((size_t)n, sizeof *closed);
  int opened = 0;
  double t0 = now_s();
  for (int i = 0; i < n; i++) {
    fds[i] = dial(1);
    opened += fds[i] >= 0;
  }
  int open_now = opened;
  while (open_now && now_s() - t0 < hold) {
    for (int i = 0; i < n; i++) {
      if (fds[i] < 0) continue;
      char b;
      ssize_t r = recv(fds[i], &b, 1, MSG_DONTWAIT);
      int gone = r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR && errno != ENOTCONN);
      if (gone) {
        closed[i] = now_s() - t0;
        close(fds[i]);
        fds[i] = -1;
        open_now--;
      }
    }
    usleep(20000);
  }
  double longest = 0;
  for (int i = 0; i < n; i++) {
    if (fds[i] >= 0) close(fds[i]);
    else if (closed[i] > longest) longest = closed[i];
  }
  char d[160];
  snprintf(d, sizeof d, "opened=%d still_open_after_%.1fs=%d longest_held_s=%.2f", opened, hold, open_now, longest);
  free(fds);
  free(closed);
  /* The listener holds silent sockets without a clock, but no more than its
   * per-source cap of them: each one past it evicts this source's oldest,
   * so all but the newest max_held were let go of while the flood went on. */
  return result("idle", opened == n && open_now <= max_held, NULL, d);
}

static int attack_simple(const char *name) {
  int fd = dial(0);
  if (fd < 0) return result(name, 0, NULL, "cannot connect");
  uint8_t buf[256];
  size_t len = 0;
  if (!strcmp(name, "garbage")) {
    rr_hs_random(buf, sizeof buf);
    len = sizeof buf;
  } else {
    rr_hs_hello h = make_hello(0x1234, 0, 0);
    rr_hs_hello_encode(&h, buf);
    len = RR_HS_HELLO_LEN;
    if (!strcmp(name, "truncated")) len = RR_HS_HELLO_LEN / 2;
    else buf[4] = RR_HS_VERSION - 1; /* oldversion */
  }
  send_full(fd, buf, len);
  double t = wait_closed(fd, 3.0);
  close(fd);
  char d[96];
  snprintf(d, sizeof d, "closed_after_s=%.2f", t);
  /* A malformed hello is refused at once; a short one when its time is up. */
  return result(name, t >= 0 && t < 2.0, NULL, d);
}

static int attack_wrong_secret(void) {
  int fd = dial(0);
  if (fd < 0) return result("wrong-secret", 0, NULL, "cannot connect");
  uint8_t secret[RR_HS_SECRET_LEN], hello[RR_HS_HELLO_LEN], mac[RR_HS_MAC_LEN];
  memcpy(secret, peer.secret, sizeof secret);
  secret[0] ^= 1;
  rr_hs_hello h = make_hello(0x5eed, 0, 0);
  rr_hs_challenge ch;
  if (hello_challenge(fd, &h, hello, &ch)) {
    close(fd);
    return result("wrong-secret", 0, NULL, "no challenge");
  }
  /* The listener proves itself first: under a wrong secret its proof fails,
   * so a connector never talks to a listener that is not its handle's. */
  rr_hs_mac_challenge(secret, hello, ch.nonce, ch.gen_floor, mac);
  int listener_proof_fails = !rr_hs_mac_equal(mac, ch.mac);
  send_proof(fd, secret, hello, &ch);
  uint8_t in[RR_HS_ACCEPT_FIXED];
  int accepted = recv_full(fd, in, sizeof in) == 0;
  close(fd);
  char d[96];
  snprintf(d, sizeof d, "listener_proof_rejected=%d accepted=%d", listener_proof_fails, accepted);
  return result("wrong-secret", listener_proof_fails && !accepted, NULL, d);
}

/* Authenticated reopen of a rail: the listener's ACCEPT, or -1. gen 0 asks
 * for one just past the listener's floor. */
static int reopen(uint64_t conn, int rail, uint32_t gen, uint32_t *floor_out) {
  for (int pass = 0; pass < 2; pass++) {
    int fd = dial(0);
    if (fd < 0) return -1;
    uint8_t hello[RR_HS_HELLO_LEN];
    rr_hs_challenge ch;
    uint32_t g = gen ? gen : (floor_out && pass ? *floor_out + 1 : 1);
    rr_hs_hello h = make_hello(conn, rail, g);
    if (hello_challenge(fd, &h, hello, &ch)) {
      close(fd);
      return -1;
    }
    uint8_t mac[RR_HS_MAC_LEN];
    rr_hs_mac_challenge(peer.secret, hello, ch.nonce, ch.gen_floor, mac);
    if (!rr_hs_mac_equal(mac, ch.mac)) {
      fprintf(stderr, "rerail-hostile: the listener's proof does not verify\n");
      close(fd);
      return -1;
    }
    if (floor_out) *floor_out = ch.gen_floor;
    if (!gen && pass == 0 && g != ch.gen_floor + 1) {
      close(fd); /* learnt the floor: go again just past it */
      continue;
    }
    send_proof(fd, peer.secret, hello, &ch);
    uint8_t in[RR_HS_ACCEPT_FIXED];
    uint8_t commit[RR_HS_COMMIT_LEN];
    rr_hs_commit cm = {.rails = 1u << rail};
    rr_hs_commit_encode(&cm, commit); /* install it, as the real sender would */
    if (recv_full(fd, in, sizeof in) || send_full(fd, commit, sizeof commit)) {
      close(fd);
      return -1;
    }
    return fd;
  }
  return -1;
}

static int attack_runaway(uint64_t conn, int rail) {
  uint32_t floor = 0;
  int fd = reopen(conn, rail, 0xFFFFFFFFu, &floor);
  if (fd >= 0) close(fd);
  char d[96];
  snprintf(d, sizeof d, "listener_floor=%u accepted=%d", floor, fd >= 0);
  return result("runaway", fd < 0, NULL, d);
}

static int attack_frame(uint64_t conn, int rail, const char *kind) {
  uint32_t floor = 0;
  int fd = reopen(conn, rail, 0, &floor);
  char d[160];
  if (fd < 0) {
    snprintf(d, sizeof d, "kind=%s not authenticated as a reopened rail (floor %u)", kind, floor);
    return result("frame", 0, NULL, d);
  }
  /* A write is checked (key, range, length) only when it names the
   * receiver's current epoch, which the attacker does not know: older ones
   * are sunk unread, as frames that sat in a failed rail's buffers must be.
   * So the write kinds sweep the 16-bit epoch tag (and every slot) with
   * header-only frames; the first that names the current epoch is refused
   * and fails the rail, which ends the sweep. */
  uint8_t hb[TCP_FRAME_BYTES];
  tcp_frame_hdr h = {.type = TCP_FRAME_WRITE};
  if (!strcmp(kind, "key") || !strcmp(kind, "outside") || !strcmp(kind, "eager")) {
    int eager = !strcmp(kind, "eager");
    rr_hs_random(&h.raddr, sizeof h.raddr);
    uint32_t chunk = !strcmp(kind, "outside") ? (1u << 18) - 1 : 0; /* far past any receive */
    if (eager) h.flags = TCP_FRAME_F_EAGER;
    static uint8_t batch[32 * TCP_FRAME_BYTES];
    for (uint32_t f = 0; f < 65536; f++) {
      for (uint32_t slot = 0; slot < 32; slot++) {
        h.epoch_tag = (uint16_t)f;
        h.imm = (f & 0xf) << 28 | slot << 23 | chunk | (eager ? 1u << 19 : 0);
        /* eager: receive 3200 + slot assumed from receive 0, far past the 32 a sender may assume */
        if (eager) h.raddr = 3200u + slot;
        rr_hs_random(&h.rkey, sizeof h.rkey);
        tcp_frame_encode(&h, batch + slot * TCP_FRAME_BYTES);
      }
      /* Refused: the receiver failed the rail and reads no more (or closed it). */
      struct pollfd p = {.fd = fd, .events = POLLOUT};
      if (poll(&p, 1, 1000) != 1 || !(p.revents & POLLOUT) || send_full(fd, batch, sizeof batch)) break;
    }
  } else {
    static uint8_t payload[4096];
    size_t hlen = TCP_FRAME_BYTES, plen = 0;
    if (!strcmp(kind, "truncated")) hlen = 13;                               /* half a header, then EOF */
    else if (!strcmp(kind, "type")) h.type = 0x7f, h.len = 16, plen = 16;    /* no such frame */
    else if (!strcmp(kind, "flags")) h.type = TCP_FRAME_CTRL, h.flags = 0x80, h.len = 8, plen = 8;
    else if (!strcmp(kind, "ctrl")) h.type = TCP_FRAME_CTRL, h.len = 1u << 20, plen = sizeof payload; /* oversized */
    else if (!strcmp(kind, "drainlen")) h.type = TCP_FRAME_DRAIN, h.len = 64, plen = 64; /* a drain has no payload */
    tcp_frame_encode(&h, hb);
    send_full(fd, hb, hlen);
    if (plen) send_full(fd, payload, plen);
    if (!strcmp(kind, "truncated")) {
      close(fd);
      snprintf(d, sizeof d, "kind=%s generation=%u sent 13 bytes and closed", kind, floor + 1);
      return result("frame", 1, NULL, d);
    }
  }
  /* The receiver fails this rail and stops reading it (the script checks
   * its log for the reason, and the traffic for the connection's health);
   * the real sender reopens the rail when it needs it. */
  double t = wait_closed(fd, 1.0);
  close(fd);
  snprintf(d, sizeof d, "kind=%s generation=%u sent; %s", kind, floor + 1,
           t >= 0 ? "the listener closed it" : "the rail stopped reading");
  return result("frame", 1, NULL, d);
}

static int parse_src(const char *list) {
  char tmp[512];
  snprintf(tmp, sizeof tmp, "%s", list);
  for (char *save = NULL, *t = strtok_r(tmp, ",", &save); t && nsrcs < 8; t = strtok_r(NULL, ",", &save)) {
    struct sockaddr_storage *s = &srcs[nsrcs];
    memset(s, 0, sizeof *s);
    if (inet_pton(AF_INET, t, &((struct sockaddr_in *)s)->sin_addr) == 1) s->ss_family = AF_INET;
    else if (inet_pton(AF_INET6, t, &((struct sockaddr_in6 *)s)->sin6_addr) == 1) s->ss_family = AF_INET6;
    else return -1;
    nsrcs++;
  }
  return 0;
}

int main(int argc, char **argv) {
  const char *handle = NULL;
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    if (!strcmp(argv[i], "--handle") && i + 1 < argc) handle = argv[++i];
    else if (!strcmp(argv[i], "--addr") && i + 1 < argc) addr_index = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--src") && i + 1 < argc) {
      if (parse_src(argv[++i])) return fprintf(stderr, "bad --src\n"), 2;
    } else {
      return fprintf(stderr, "unknown option %s (see the head of rerail-hostile.c)\n", argv[i]), 2;
    }
  }
  if (!handle || i >= argc || load_handle(handle)) return fprintf(stderr, "usage: rerail-hostile --handle FILE ATTACK\n"), 2;
  if (addr_index < 0 || addr_index >= peer.naddrs) return fprintf(stderr, "no address %d in the handle\n", addr_index), 2;
  const char *a = argv[i];
  if (!strcmp(a, "idle") && i + 3 < argc) return attack_idle(atoi(argv[i + 1]), atof(argv[i + 2]), atoi(argv[i + 3]));
  if (!strcmp(a, "garbage") || !strcmp(a, "truncated") || !strcmp(a, "oldversion")) return attack_simple(a);
  if (!strcmp(a, "wrong-secret")) return attack_wrong_secret();
  if (!strcmp(a, "runaway") && i + 2 < argc)
    return attack_runaway(strtoull(argv[i + 1], NULL, 16), atoi(argv[i + 2]));
  if (!strcmp(a, "frame") && i + 3 < argc)
    return attack_frame(strtoull(argv[i + 1], NULL, 16), atoi(argv[i + 2]), argv[i + 3]);
  fprintf(stderr, "unknown attack %s\n", a);
  return 2;
}
