/* rerail-pingpong-bench: the 8-byte round trip of the kernel's TCP on
 * loopback, in the shapes that bound a network plugin's round trip.
 *
 *   --conns 1   one connection carries both directions: each reply carries
 *               the TCP acknowledgement of the request (the raw baseline of
 *               rerail-raw-socket-bench's latency test).
 *   --conns 2   one connection per direction, as NCCL's comms are (a send
 *               comm and a receive comm are separate connections, and NCCL's
 *               socket transport and rerail's TCP rail both keep that shape):
 *               each segment is acknowledged by a pure TCP ACK of its own.
 *   --recv spin a non-blocking recv() in a loop (what a proxy thread's test()
 *               amounts to);
 *   --recv uring an io_uring receive is armed, and its completion is polled
 *               in the shared ring: no system call while waiting (the
 *               kernel runs the receive as task work on this thread when the
 *               data arrives).
 *
 * Both sides run in this command (two processes); every reply is checked. */
#include "bench_common.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <linux/io_uring.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

typedef enum recv_mode { RECV_SPIN, RECV_URING } recv_mode;

typedef struct options {
  int conns;
  recv_mode recv;
  long iters, warmup;
  bool csv;
} options;

/* ---- a minimal io_uring: one receive in flight, completions read in user memory ---- */
typedef struct uring {
  int fd;
  _Atomic unsigned *sq_tail;
  unsigned sq_mask, *sq_array;
  struct io_uring_sqe *sqes;
  _Atomic unsigned *cq_head, *cq_tail;
  unsigned cq_mask;
  struct io_uring_cqe *cqes;
} uring;

static int uring_open(uring *u) {
  struct io_uring_params p;
  memset(&p, 0, sizeof p);
  u->fd = (int)syscall(__NR_io_uring_setup, 4, &p);
  if (u->fd < 0) return -errno;
  if (!(p.features & IORING_FEAT_SINGLE_MMAP)) return -ENOTSUP; /* kernels before 5.4 */
  size_t sq_bytes = p.sq_off.array + p.sq_entries * sizeof(unsigned);
  size_t cq_bytes = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
  size_t ring_bytes = sq_bytes > cq_bytes ? sq_bytes : cq_bytes;
  char *ring = mmap(NULL, ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, u->fd, IORING_OFF_SQ_RING);
  if (ring == MAP_FAILED) return -errno;
  void *sqes = mmap(NULL, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_POPULATE, u->fd, IORING_OFF_SQES);
  if (sqes == MAP_FAILED) return -errno;
  u->sqes = sqes;
  u->sq_tail = (_Atomic unsigned *)(ring + p.sq_off.tail);
  u->sq_mask = *(unsigned *)(ring + p.sq_off.ring_mask);
  u->sq_array = (unsigned *)(ring + p.sq_off.array);
  u->cq_head = (_Atomic unsigned *)(ring + p.cq_off.head);
  u->cq_tail = (_Atomic unsigned *)(ring + p.cq_off.tail);
  u->cq_mask = *(unsigned *)(ring + p.cq_off.ring_mask);
  u->cqes = (struct io_uring_cqe *)(ring + p.cq_off.cqes);
  return 0;
}

/* Queues a receive of up to len bytes into buf and submits it. */
static int uring_arm_recv(uring *u, int sock, void *buf, unsigned len) {
  unsigned tail = atomic_load_explicit(u->sq_tail, memory_order_relaxed);
  unsigned idx = tail & u->sq_mask;
  struct io_uring_sqe *s = &u->sqes[idx];
  memset(s, 0, sizeof *s);
  s->opcode = IORING_OP_RECV;
  s->fd = sock;
  s->addr = (uint64_t)(uintptr_t)buf;
  s->len = len;
  u->sq_array[idx] = idx;
  atomic_store_explicit(u->sq_tail, tail + 1, memory_order_release);
  for (;;) {
    long n = syscall(__NR_io_uring_enter, u->fd, 1, 0, 0, NULL, 0);
    if (n == 1) return 0;
    if (n < 0 && errno == EINTR) continue;
    return n < 0 ? -errno : -EIO;
  }
}

/* Spins until the armed receive completes; returns its result (bytes or -errno). */
static int uring_wait_recv(uring *u) {
  unsigned head = atomic_load_explicit(u->cq_head, memory_order_relaxed);
  while (atomic_load_explicit(u->cq_tail, memory_order_acquire) == head) {
  }
  int res = u->cqes[head & u->cq_mask].res;
  atomic_store_explicit(u->cq_head, head + 1, memory_order_release);
  return res;
}

/* ---- one side of the ping-pong ---- */
typedef struct side {
  int in, out; /* the same socket with --conns 1 */
  recv_mode mode;
  uring ring;
} side;

/* Receives exactly 8 bytes. Returns 0, or -1 when the peer is gone. */
static int recv8(side *s, void *msg) {
  size_t got = 0;
  while (got < 8) {
    ssize_t n;
    if (s->mode == RECV_URING) {
      int rc = uring_arm_recv(&s->ring, s->in, (char *)msg + got, (unsigned)(8 - got));
      if (rc) bc_die("io_uring receive: %s", strerror(-rc));
      n = uring_wait_recv(&s->ring);
      if (n < 0) {
        if (n == -EAGAIN || n == -EINTR) continue;
        bc_die("io_uring receive: %s", strerror((int)-n));
      }
    } else {
      n = recv(s->in, (char *)msg + got, 8 - got, MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
        bc_die("recv: %s", strerror(errno));
      }
    }
    if (n == 0) return -1;
    got += (size_t)n;
  }
  return 0;
}

static void send8(const side *s, const void *msg) {
  size_t sent = 0;
  while (sent < 8) {
    ssize_t n = send(s->out, (const char *)msg + sent, 8 - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) bc_die("send: %s", n < 0 ? strerror(errno) : "nothing sent");
    sent += (size_t)n;
  }
}

/* The responder echoes each 8-byte sequence number until the initiator closes. */
static void respond(side *s) {
  uint64_t seq;
  while (recv8(s, &seq) == 0) send8(s, &seq);
}

static void initiate(side *s, const options *o, double *rtt_us) {
  long total = o->warmup + o->iters;
  for (long i = 0; i < total; i++) {
    uint64_t seq = (uint64_t)i, back = ~0ull;
    uint64_t t0 = bc_now_ns();
    send8(s, &seq);
    if (recv8(s, &back)) bc_die("the responder is gone");
    uint64_t t1 = bc_now_ns();
    if (back != seq) bc_die("round trip %ld: got %llu back", i, (unsigned long long)back);
    if (i >= o->warmup) rtt_us[i - o->warmup] = (double)(t1 - t0) / 1e3;
  }
}

/* ---- setup ---- */
static int listener(int *port) {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t alen = sizeof a;
  if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 2) ||
      getsockname(l, (struct sockaddr *)&a, &alen))
    bc_die("listen on loopback: %s", strerror(errno));
  *port = ntohs(a.sin_port);
  return l;
}

static int dial(int port) {
  int c = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                          .sin_port = htons((uint16_t)port)};
  if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof a)) bc_die("connect: %s", strerror(errno));
  return c;
}

static void nodelay(int fd) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one)) bc_die("TCP_NODELAY: %s", strerror(errno));
}

static void usage(FILE *f) {
  fprintf(f, "usage: rerail-pingpong-bench [--conns 1|2] [--recv spin|uring] [--iters N] [--warmup N] [--csv]\n"
             "  8-byte round trip over loopback TCP between two processes (this command forks)\n"
             "  --conns 1|2      one connection for both directions, or one per direction (default 2)\n"
             "  --recv spin|uring busy-poll recv(), or an io_uring receive polled in the ring (default spin)\n"
             "  --iters N        round trips measured (default 20000)\n"
             "  --warmup N       round trips before measuring (default 1000)\n"
             "  --csv            print: conns,recv,p50_us,p99_us,min_us,iters\n");
}

static void parse(int argc, char **argv, options *o) {
  *o = (options){.conns = 2, .recv = RECV_SPIN, .iters = 20000, .warmup = 1000};
  static const struct option lo[] = {{"conns", required_argument, 0, 'c'}, {"recv", required_argument, 0, 'r'},
                                     {"iters", required_argument, 0, 'i'}, {"warmup", required_argument, 0, 'w'},
                                     {"csv", no_argument, 0, 'v'},        {"help", no_argument, 0, 'h'},
                                     {0, 0, 0, 0}};
  long v;
  for (int c; (c = getopt_long(argc, argv, "", lo, NULL)) != -1;) {
    switch (c) {
    case 'c':
      if (bc_parse_int(optarg, 1, 2, &v)) bc_die("--conns takes 1 or 2, not '%s'", optarg);
      o->conns = (int)v;
      break;
    case 'r':
      if (!strcmp(optarg, "spin")) o->recv = RECV_SPIN;
      else if (!strcmp(optarg, "uring")) o->recv = RECV_URING;
      else bc_die("--recv takes spin or uring, not '%s'", optarg);
      break;
    case 'i':
      if (bc_parse_int(optarg, 1, 100000000, &o->iters)) bc_die("bad --iters '%s'", optarg);
      break;
    case 'w':
      if (bc_parse_int(optarg, 0, 100000000, &o->warmup)) bc_die("bad --warmup '%s'", optarg);
      break;
    case 'v': o->csv = true; break;
    case 'h': usage(stdout); exit(0);
    default: usage(stderr); exit(2);
    }
  }
  if (optind < argc) bc_die("unexpected argument '%s'", argv[optind]);
}

int main(int argc, char **argv) {
  bc_set_prog("rerail-pingpong-bench");
  options o;
  parse(argc, argv, &o);
  int ports[2], listeners[2] = {-1, -1};
  for (int k = 0; k < o.conns; k++) listeners[k] = listener(&ports[k]);
  pid_t pid = fork();
  if (pid < 0) bc_die("fork: %s", strerror(errno));
  /* Connection k: the initiator (parent) dials, the responder accepts. With
   * two, the initiator sends on connection 0 and receives on connection 1. */
  int socks[2] = {-1, -1};
  for (int k = 0; k < o.conns; k++) {
    socks[k] = pid == 0 ? accept(listeners[k], NULL, NULL) : dial(ports[k]);
    if (socks[k] < 0) bc_die("accept: %s", strerror(errno));
    nodelay(socks[k]);
    close(listeners[k]);
  }
  side s = {.mode = o.recv};
  s.in = pid == 0 ? socks[0] : socks[o.conns - 1];
  s.out = pid == 0 ? socks[o.conns - 1] : socks[0];
  if (o.recv == RECV_URING) {
    int rc = uring_open(&s.ring);
    if (rc) bc_die("io_uring is not available here (%s): try --recv spin", strerror(-rc));
  }
  if (pid == 0) {
    respond(&s);
    _exit(0);
  }
  double *rtt = malloc(sizeof(double) * (size_t)o.iters);
  if (!rtt) bc_die("out of memory");
  initiate(&s, &o, rtt);
  for (int k = 0; k < o.conns; k++) close(socks[k]);
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
    bc_die("the responder failed (status %d)", status);
  bc_sort_doubles(rtt, (size_t)o.iters);
  double p50 = bc_percentile_sorted(rtt, (size_t)o.iters, 50), p99 = bc_percentile_sorted(rtt, (size_t)o.iters, 99);
  const char *mode = o.recv == RECV_URING ? "uring" : "spin";
  if (o.csv) printf("%d,%s,%.3f,%.3f,%.3f,%ld\n", o.conns, mode, p50, p99, rtt[0], o.iters);
  else
    printf("8-byte round trip, %d connection(s), receive by %s: p50 %.2f us, p99 %.2f us, min %.2f us (%ld round trips)\n",
           o.conns, mode, p50, p99, rtt[0], o.iters);
  free(rtt);
  return 0;
}
