/* rerail-raw-socket-bench: the kernel TCP baseline that rerail's TCP rail is
 * measured against. Two processes, client and server, over TCP:
 *
 *   (a) uni-directional bandwidth (client sends, server receives) by message
 *       size, for 1..4 parallel streams (one socket each), each message sent
 *       whole with send()/recv() loops, the sender at most a window of W
 *       messages ahead of the receiver's cumulative acks; GB/s per size per
 *       stream count, and the best over stream counts, socket buffer settings
 *       and windows (--window 2,4,16: small windows keep the bytes in flight
 *       cache-resident and win at 16 KiB-256 KiB on loopback). With more than
 *       one stream, one thread per stream with blocking I/O (--io threads, the
 *       default: measured faster here than --io poll, one thread polling
 *       non-blocking sockets, which serialises all copies on one CPU);
 *   (b) 8-byte round-trip latency, ping-pong with busy-polling (non-blocking
 *       recv spin) and TCP_NODELAY: median and p99 after a warmup.
 *
 * Each test runs once per socket buffer setting (--sockbuf: kernel defaults,
 * i.e. autotuning, and SO_SNDBUF/SO_RCVBUF 4 MiB by default); tables report the
 * best. --fork (the default) runs both sides on loopback; --server and
 * --client HOST run them on two hosts. The client drives the server over a
 * control connection and prints the results. GB/s is 1e9 bytes/s. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_common.h"

#define MAX_STREAMS 16
#define MAX_SOCKBUFS 4
#define DEFAULT_PORT 18515

enum io_mode { IO_THREADS = 0, IO_POLL = 1 };

typedef struct options {
  enum { MODE_FORK, MODE_SERVER, MODE_CLIENT } mode;
  const char *host;
  int port;
  bc_sizes sizes;
  int streams[MAX_STREAMS];
  int nstreams_list;
  long sockbufs[MAX_SOCKBUFS]; /* 0 = kernel default */
  int nsockbufs;
  long windows[8];     /* messages in flight per stream; each is tried */
  int nwindows;
  int reps;            /* runs per configuration; the best counts */
  size_t bytes;   /* target bytes per bandwidth test (all streams) */
  long min_msgs;  /* per stream */
  long max_msgs;  /* per stream */
  long lat_iters, lat_warmup;
  enum io_mode io;
  int nodelay;
  int spin_yield;
  bool do_bw, do_lat, csv, json, once;
} options;

/* ---- control protocol: the client drives, the server obeys ---- */
enum { OP_SETUP = 1, OP_BW = 2, OP_LAT = 3, OP_TEARDOWN = 4, OP_QUIT = 5 };

typedef struct ctl_cmd {
  uint32_t op;
  uint32_t nstreams;  /* SETUP */
  int64_t sockbuf;    /* SETUP: 0 = default */
  uint64_t max_size;  /* SETUP */
  uint32_t io;        /* SETUP */
  uint32_t nodelay;   /* SETUP */
  uint32_t spin_yield; /* SETUP */
  uint64_t size;      /* BW */
  uint64_t msgs;      /* BW: per stream; LAT: iterations incl. warmup */
  uint64_t window;    /* BW */
} ctl_cmd;

typedef struct ctl_reply {
  int32_t status;     /* 0 ok */
  uint32_t port;      /* SETUP: data listener port */
  uint64_t errors;    /* BW/LAT: payload check failures */
  int64_t rcvbuf;     /* SETUP: effective SO_RCVBUF on the server's first stream */
} ctl_reply;

/* ---- socket helpers ---- */
/* Move all len bytes (blocking; a socket left non-blocking waits in poll()).
 * Returns -1 when the connection fails or the peer closes it. */
static int xfer_all(int fd, char *p, size_t len, bool sending) {
  while (len) {
    ssize_t r = sending ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, MSG_WAITALL);
    if (r == 0 && !sending) return -1;
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        struct pollfd pf = {.fd = fd, .events = sending ? POLLOUT : POLLIN};
        poll(&pf, 1, 100);
        continue;
      }
      return -1;
    }
    p += r;
    len -= (size_t)r;
  }
  return 0;
}

static int send_all(int fd, const void *buf, size_t len) { return xfer_all(fd, (char *)buf, len, true); }
static int recv_all(int fd, void *buf, size_t len) { return xfer_all(fd, buf, len, false); }

/* Busy-poll receive: spin on non-blocking recv; sched_yield() between empty
 * polls only with --spin-yield (for oversubscribed machines). */
static int g_spin_yield;

static int recv_spin(int fd, void *buf, size_t len) {
  char *p = buf;
  while (len) {
    ssize_t r = recv(fd, p, len, MSG_DONTWAIT);
    if (r > 0) {
      p += r;
      len -= (size_t)r;
    } else if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      return -1;
    } else if (g_spin_yield) {
      sched_yield();
    }
  }
  return 0;
}

static void set_nonblock(int fd, bool on) {
  int fl = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK));
}

static void set_int_opt(int fd, int level, int opt, int v) {
  if (setsockopt(fd, level, opt, &v, sizeof(v))) bc_warn("setsockopt(%d): %s", opt, strerror(errno));
}

/* --cc: every socket's congestion control ("" = the system's), as
 * RERAIL_TCP_CONGESTION sets it on rerail's rails. Accepted sockets inherit
 * the listener's. */
static char g_cc[16];

static void set_bufs(int fd, long sockbuf) {
  if (g_cc[0] && setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, g_cc, (socklen_t)strlen(g_cc)))
    bc_die("--cc %s: %s", g_cc, strerror(errno));
  if (sockbuf <= 0) return;
  set_int_opt(fd, SOL_SOCKET, SO_SNDBUF, (int)sockbuf);
  set_int_opt(fd, SOL_SOCKET, SO_RCVBUF, (int)sockbuf);
}

static int get_int_opt(int fd, int level, int opt) {
  int v = 0;
  socklen_t l = sizeof(v);
  getsockopt(fd, level, opt, &v, &l);
  return v;
}

/* Listens on addr:port (port 0: ephemeral). Returns fd, stores the port. */
static int listen_on(const struct sockaddr_storage *addr, socklen_t alen, int port, long sockbuf,
                     int *bound_port) {
  struct sockaddr_storage a = *addr;
  if (a.ss_family == AF_INET) ((struct sockaddr_in *)&a)->sin_port = htons((uint16_t)port);
  else ((struct sockaddr_in6 *)&a)->sin6_port = htons((uint16_t)port);
  int fd = socket(a.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  set_int_opt(fd, SOL_SOCKET, SO_REUSEADDR, 1);
  set_bufs(fd, sockbuf); /* before listen(): the window scale is fixed at SYN */
  if (bind(fd, (struct sockaddr *)&a, alen) || listen(fd, 64)) {
    close(fd);
    return -1;
  }
  struct sockaddr_storage b;
  socklen_t bl = sizeof(b);
  getsockname(fd, (struct sockaddr *)&b, &bl);
  *bound_port = ntohs(b.ss_family == AF_INET ? ((struct sockaddr_in *)&b)->sin_port
                                             : ((struct sockaddr_in6 *)&b)->sin6_port);
  return fd;
}

static int resolve(const char *host, int port, struct sockaddr_storage *out, socklen_t *olen) {
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res;
  char ps[16];
  snprintf(ps, sizeof(ps), "%d", port);
  if (getaddrinfo(host, ps, &hints, &res)) return -1;
  memcpy(out, res->ai_addr, res->ai_addrlen);
  *olen = res->ai_addrlen;
  freeaddrinfo(res);
  return 0;
}

static int connect_to(const struct sockaddr_storage *addr, socklen_t alen, int port, long sockbuf) {
  struct sockaddr_storage a = *addr;
  if (a.ss_family == AF_INET) ((struct sockaddr_in *)&a)->sin_port = htons((uint16_t)port);
  else ((struct sockaddr_in6 *)&a)->sin6_port = htons((uint16_t)port);
  for (int attempt = 0; attempt < 100; attempt++) {
    int fd = socket(a.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    set_bufs(fd, sockbuf);
    if (connect(fd, (struct sockaddr *)&a, alen) == 0) return fd;
    int e = errno;
    close(fd);
    if (e != ECONNREFUSED && e != EINTR) return -1;
    usleep(50000);
  }
  return -1;
}

/* ---- bandwidth: per-stream workers ---- */
typedef struct stream {
  int fd;
  char *buf;
  size_t size;
  uint64_t msgs, window, ack_every;
  uint64_t errors;
  uint64_t t_start, t_end;
  int rc;
} stream;

static uint64_t ack_every_for(uint64_t window) { return window >= 2 ? window / 2 : 1; }

static void *sender_thread(void *arg) {
  stream *s = arg;
  uint64_t sent = 0, acked = 0;
  s->rc = -1;
  s->t_start = bc_now_ns();
  while (sent < s->msgs) {
    while (sent - acked >= s->window)
      if (recv_all(s->fd, &acked, sizeof(acked))) return NULL;
    bc_stamp(s->buf, s->size, sent);
    if (send_all(s->fd, s->buf, s->size)) return NULL;
    sent++;
  }
  while (acked < s->msgs)
    if (recv_all(s->fd, &acked, sizeof(acked))) return NULL;
  s->t_end = bc_now_ns();
  s->rc = 0;
  return NULL;
}

static void *receiver_thread(void *arg) {
  stream *s = arg;
  s->rc = -1;
  for (uint64_t k = 1; k <= s->msgs; k++) {
    if (recv_all(s->fd, s->buf, s->size)) return NULL;
    if (!bc_stamp_ok(s->buf, s->size, k - 1)) s->errors++;
    if (k % s->ack_every == 0 || k == s->msgs)
      if (send_all(s->fd, &k, sizeof(k))) return NULL;
  }
  s->rc = 0;
  return NULL;
}

static int run_threads(stream *st, int n, void *(*fn)(void *)) {
  pthread_t th[MAX_STREAMS];
  if (n == 1) {
    fn(&st[0]);
    return st[0].rc;
  }
  for (int i = 0; i < n; i++)
    if (pthread_create(&th[i], NULL, fn, &st[i])) bc_die("pthread_create failed");
  int rc = 0;
  for (int i = 0; i < n; i++) {
    pthread_join(th[i], NULL);
    if (st[i].rc) rc = -1;
  }
  return rc;
}

/* One thread, non-blocking sockets, poll(). */
static int run_poll_sender(stream *st, int n) {
  if (n < 1 || n > MAX_STREAMS) return -1;
  struct pollfd pf[MAX_STREAMS];
  uint64_t sent[MAX_STREAMS] = {0}, acked[MAX_STREAMS] = {0};
  size_t off[MAX_STREAMS] = {0};
  unsigned char ackb[MAX_STREAMS][8];
  size_t ackoff[MAX_STREAMS] = {0};
  uint64_t t0 = bc_now_ns();
  for (int i = 0; i < n; i++) set_nonblock(st[i].fd, true);
  int live = n;
  while (live) {
    for (int i = 0; i < n; i++) {
      pf[i].fd = acked[i] < st[i].msgs ? st[i].fd : -1;
      pf[i].events = POLLIN;
      if (sent[i] < st[i].msgs && sent[i] - acked[i] < st[i].window) pf[i].events |= POLLOUT;
      pf[i].revents = 0;
    }
    if (poll(pf, (nfds_t)n, 10000) < 0 && errno != EINTR) return -1;
    for (int i = 0; i < n; i++) {
      stream *s = &st[i];
      if (pf[i].revents & (POLLERR | POLLHUP)) return -1;
      if (pf[i].revents & POLLOUT) {
        while (sent[i] < s->msgs && sent[i] - acked[i] < s->window) {
          if (off[i] == 0) bc_stamp(s->buf, s->size, sent[i]);
          ssize_t r = send(s->fd, s->buf + off[i], s->size - off[i], MSG_DONTWAIT | MSG_NOSIGNAL);
          if (r < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
            return -1;
          }
          off[i] += (size_t)r;
          if (off[i] == s->size) {
            off[i] = 0;
            sent[i]++;
          }
        }
      }
      if (pf[i].revents & POLLIN) {
        unsigned char tmp[512];
        for (;;) {
          ssize_t r = recv(s->fd, tmp, sizeof(tmp), MSG_DONTWAIT);
          if (r == 0) return -1;
          if (r < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
            return -1;
          }
          for (ssize_t j = 0; j < r; j++) {
            ackb[i][ackoff[i]++] = tmp[j];
            if (ackoff[i] == 8) {
              memcpy(&acked[i], ackb[i], 8);
              ackoff[i] = 0;
            }
          }
        }
        if (acked[i] >= s->msgs) {
          live--;
          s->t_end = bc_now_ns();
        }
      }
    }
  }
  for (int i = 0; i < n; i++) {
    st[i].t_start = t0;
    set_nonblock(st[i].fd, false);
  }
  return 0;
}

static int run_poll_receiver(stream *st, int n) {
  if (n < 1 || n > MAX_STREAMS) return -1;
  struct pollfd pf[MAX_STREAMS];
  uint64_t got[MAX_STREAMS] = {0};
  size_t off[MAX_STREAMS] = {0};
  for (int i = 0; i < n; i++) set_nonblock(st[i].fd, true);
  int live = n;
  while (live) {
    for (int i = 0; i < n; i++) {
      pf[i].fd = got[i] < st[i].msgs ? st[i].fd : -1;
      pf[i].events = POLLIN;
      pf[i].revents = 0;
    }
    if (poll(pf, (nfds_t)n, 10000) < 0 && errno != EINTR) return -1;
    for (int i = 0; i < n; i++) {
      stream *s = &st[i];
      if (!(pf[i].revents & (POLLIN | POLLERR | POLLHUP))) continue;
      for (;;) {
        ssize_t r = recv(s->fd, s->buf + off[i], s->size - off[i], MSG_DONTWAIT);
        if (r == 0) return -1;
        if (r < 0) {
          if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
          return -1;
        }
        off[i] += (size_t)r;
        if (off[i] < s->size) continue;
        off[i] = 0;
        if (!bc_stamp_ok(s->buf, s->size, got[i])) s->errors++;
        uint64_t k = ++got[i];
        if (k % s->ack_every == 0 || k == s->msgs)
          if (send_all(s->fd, &k, sizeof(k))) return -1;
        if (k == s->msgs) {
          live--;
          break;
        }
      }
    }
  }
  for (int i = 0; i < n; i++) set_nonblock(st[i].fd, false);
  return 0;
}

/* ---- server ---- */
static void server_session(int ctl, const options *o) {
  (void)o;
  struct sockaddr_storage local;
  socklen_t llen = sizeof(local);
  getsockname(ctl, (struct sockaddr *)&local, &llen);
  stream st[MAX_STREAMS];
  int ns = 0;
  enum io_mode io = IO_THREADS;
  memset(st, 0, sizeof(st));
  for (;;) {
    ctl_cmd c;
    ctl_reply rep = {0};
    if (recv_all(ctl, &c, sizeof(c))) break;
    if (c.op == OP_QUIT) break;
    switch (c.op) {
    case OP_SETUP: {
      if (c.nstreams < 1 || c.nstreams > MAX_STREAMS) bc_die("bad stream count");
      int port, lfd = listen_on(&local, llen, 0, c.sockbuf, &port);
      if (lfd < 0) bc_die("listen: %s", strerror(errno));
      rep.port = (uint32_t)port;
      if (send_all(ctl, &rep, sizeof(rep))) bc_die("control connection lost");
      ns = (int)c.nstreams;
      io = (enum io_mode)c.io;
      g_spin_yield = (int)c.spin_yield;
      for (int i = 0; i < ns; i++) {
        st[i].fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (st[i].fd < 0) bc_die("accept: %s", strerror(errno));
        if (c.nodelay) set_int_opt(st[i].fd, IPPROTO_TCP, TCP_NODELAY, 1);
        st[i].buf = bc_alloc(c.max_size);
        if (!st[i].buf) bc_die("out of memory");
      }
      close(lfd);
      rep.rcvbuf = get_int_opt(st[0].fd, SOL_SOCKET, SO_RCVBUF);
      break;
    }
    case OP_BW:
      for (int i = 0; i < ns; i++) {
        st[i].size = c.size;
        st[i].msgs = c.msgs;
        st[i].window = c.window;
        st[i].ack_every = ack_every_for(c.window);
        st[i].errors = 0;
      }
      rep.status = io == IO_POLL ? run_poll_receiver(st, ns) : run_threads(st, ns, receiver_thread);
      for (int i = 0; i < ns; i++) rep.errors += st[i].errors;
      break;
    case OP_LAT: {
      int fd = st[0].fd;
      set_nonblock(fd, true);
      for (uint64_t i = 0; i < c.msgs; i++) {
        uint64_t v;
        if (recv_spin(fd, &v, 8) || send_all(fd, &v, 8)) {
          rep.status = -1;
          break;
        }
        if (v != i) rep.errors++;
      }
      set_nonblock(fd, false);
      break;
    }
    case OP_TEARDOWN:
      for (int i = 0; i < ns; i++) {
        close(st[i].fd);
        bc_free(st[i].buf);
      }
      memset(st, 0, sizeof(st));
      ns = 0;
      break;
    default:
      bc_die("unknown control op %u", c.op);
    }
    /* SETUP replies twice: the port before accepting, this one when connected. */
    if (send_all(ctl, &rep, sizeof(rep))) break;
  }
  for (int i = 0; i < ns; i++) {
    close(st[i].fd);
    bc_free(st[i].buf);
  }
}

/* ---- client ---- */
typedef struct lat_result {
  double p50, p99, min, mean;
  int ok;
} lat_result;

typedef struct client {
  const options *o;
  int ctl;
  struct sockaddr_storage addr;
  socklen_t alen;
  stream st[MAX_STREAMS];
  int ns;
  long rcvbuf_seen[MAX_SOCKBUFS];
} client;

static ctl_reply ctl_call(client *cl, const ctl_cmd *c) {
  ctl_reply r;
  if (send_all(cl->ctl, c, sizeof(*c)) || recv_all(cl->ctl, &r, sizeof(r)))
    bc_die("control connection to the server lost");
  return r;
}

static long client_setup(client *cl, int nstreams, long sockbuf, size_t max_size) {
  const options *o = cl->o;
  ctl_cmd c = {.op = OP_SETUP, .nstreams = (uint32_t)nstreams, .sockbuf = sockbuf,
               .max_size = max_size, .io = (uint32_t)o->io, .nodelay = (uint32_t)o->nodelay,
               .spin_yield = (uint32_t)o->spin_yield};
  ctl_reply r;
  if (send_all(cl->ctl, &c, sizeof(c)) || recv_all(cl->ctl, &r, sizeof(r)))
    bc_die("control connection to the server lost");
  memset(cl->st, 0, sizeof(cl->st));
  for (int i = 0; i < nstreams; i++) {
    int fd = connect_to(&cl->addr, cl->alen, (int)r.port, sockbuf);
    if (fd < 0) bc_die("connect data stream: %s", strerror(errno));
    if (o->nodelay) set_int_opt(fd, IPPROTO_TCP, TCP_NODELAY, 1);
    cl->st[i].fd = fd;
    cl->st[i].buf = bc_alloc(max_size);
    if (!cl->st[i].buf) bc_die("out of memory");
    bc_fill_pattern(cl->st[i].buf, max_size, (uint64_t)i + 1);
  }
  cl->ns = nstreams;
  if (recv_all(cl->ctl, &r, sizeof(r))) bc_die("control connection to the server lost");
  return r.rcvbuf;
}

static void client_teardown(client *cl) {
  ctl_cmd c = {.op = OP_TEARDOWN};
  for (int i = 0; i < cl->ns; i++) {
    close(cl->st[i].fd);
    bc_free(cl->st[i].buf);
  }
  cl->ns = 0;
  ctl_call(cl, &c);
}

static double client_bw_once(client *cl, size_t size, uint64_t msgs, uint64_t window) {
  const options *o = cl->o;
  ctl_cmd c = {.op = OP_BW, .size = size, .msgs = msgs, .window = window};
  if (send_all(cl->ctl, &c, sizeof(c))) bc_die("control connection to the server lost");
  for (int i = 0; i < cl->ns; i++) {
    cl->st[i].size = size;
    cl->st[i].msgs = msgs;
    cl->st[i].window = window;
    cl->st[i].ack_every = ack_every_for(window);
  }
  int rc = o->io == IO_POLL ? run_poll_sender(cl->st, cl->ns) : run_threads(cl->st, cl->ns, sender_thread);
  ctl_reply r;
  if (recv_all(cl->ctl, &r, sizeof(r))) bc_die("control connection to the server lost");
  if (rc || r.status) bc_die("bandwidth test failed (size %zu, %d streams)", size, cl->ns);
  if (r.errors) bc_die("payload check failed: %llu bad messages (size %zu)", (unsigned long long)r.errors, size);
  uint64_t t0 = UINT64_MAX, t1 = 0;
  for (int i = 0; i < cl->ns; i++) {
    if (cl->st[i].t_start < t0) t0 = cl->st[i].t_start;
    if (cl->st[i].t_end > t1) t1 = cl->st[i].t_end;
  }
  return (double)size * (double)msgs * cl->ns / (double)(t1 - t0);
}

static uint64_t msgs_for(const options *o, size_t size, int nstreams) {
  uint64_t m = (uint64_t)(o->bytes / ((size_t)nstreams * size));
  if (m < (uint64_t)o->min_msgs) m = (uint64_t)o->min_msgs;
  if (m > (uint64_t)o->max_msgs) m = (uint64_t)o->max_msgs;
  return m;
}

static lat_result client_lat(client *cl) {
  const options *o = cl->o;
  lat_result res = {0};
  uint64_t total = (uint64_t)(o->lat_warmup + o->lat_iters);
  double *v = malloc(sizeof(double) * (size_t)o->lat_iters);
  if (!v) bc_die("out of memory");
  ctl_cmd c = {.op = OP_LAT, .msgs = total};
  if (send_all(cl->ctl, &c, sizeof(c))) bc_die("control connection to the server lost");
  int fd = cl->st[0].fd;
  g_spin_yield = o->spin_yield;
  set_nonblock(fd, true);
  uint64_t bad = 0;
  for (uint64_t i = 0; i < total; i++) {
    uint64_t t0 = bc_now_ns(), back;
    if (send_all(fd, &i, 8) || recv_spin(fd, &back, 8)) bc_die("latency test: connection lost");
    uint64_t t1 = bc_now_ns();
    if (back != i) bad++;
    if (i >= (uint64_t)o->lat_warmup) v[i - (uint64_t)o->lat_warmup] = (double)(t1 - t0) / 1e3;
  }
  set_nonblock(fd, false);
  ctl_reply r;
  if (recv_all(cl->ctl, &r, sizeof(r))) bc_die("control connection to the server lost");
  if (r.status || r.errors || bad) bc_die("latency test: payload check failed");
  size_t n = (size_t)o->lat_iters;
  double sum = 0;
  for (size_t i = 0; i < n; i++) sum += v[i];
  bc_sort_doubles(v, n);
  res.p50 = bc_percentile_sorted(v, n, 50);
  res.p99 = bc_percentile_sorted(v, n, 99);
  res.min = v[0];
  res.mean = sum / (double)n;
  res.ok = 1;
  free(v);
  return res;
}

static const char *sockbuf_name(long sb, char *buf, size_t len) {
  if (sb <= 0) return "default";
  return bc_fmt_size((size_t)sb, buf, len);
}

/* One bandwidth figure: the best of --reps runs of one configuration. */
typedef struct bw_rec {
  size_t size;
  int streams;
  long sockbuf, window;
  double gbps;
  uint64_t msgs;
} bw_rec;

static void fmt_cfg(const bw_rec *r, char *buf, size_t len) {
  char sb[32];
  snprintf(buf, len, "%d stream%s, sockbuf %s, window %ld", r->streams, r->streams == 1 ? "" : "s",
           sockbuf_name(r->sockbuf, sb, sizeof(sb)), r->window);
}

static int client_main(const options *o, int ctl, const struct sockaddr_storage *addr, socklen_t alen) {
  client cl = {.o = o, .ctl = ctl, .addr = *addr, .alen = alen};
  const int nsz = o->sizes.n;
  size_t nrec_max = (size_t)o->nsockbufs * (size_t)o->nstreams_list * (size_t)o->nwindows * (size_t)nsz;
  bw_rec *rec = calloc(nrec_max ? nrec_max : 1, sizeof(*rec));
  size_t nrec = 0;
  lat_result lat[MAX_SOCKBUFS];
  memset(lat, 0, sizeof(lat));
  size_t max_size = bc_sizes_max(&o->sizes);
  char sb[32], szb[32], cfg[96];
  if (!rec) bc_die("out of memory");

  for (int b = 0; b < o->nsockbufs; b++) {
    if (o->do_bw) {
      for (int si = 0; si < o->nstreams_list; si++) {
        int ns = o->streams[si];
        cl.rcvbuf_seen[b] = client_setup(&cl, ns, o->sockbufs[b], max_size);
        for (int z = 0; z < nsz; z++) {
          size_t size = o->sizes.v[z];
          uint64_t m = msgs_for(o, size, ns);
          uint64_t warm = m / 8 < 4 ? 4 : m / 8;
          for (int w = 0; w < o->nwindows; w++) {
            uint64_t win = (uint64_t)o->windows[w];
            double g = 0;
            client_bw_once(&cl, size, warm, win);
            for (int rep = 0; rep < o->reps; rep++) {
              double x = client_bw_once(&cl, size, m, win);
              if (x > g) g = x;
            }
            rec[nrec++] = (bw_rec){.size = size, .streams = ns, .sockbuf = o->sockbufs[b], .window = (long)win,
                                   .gbps = g, .msgs = m};
            if (!o->csv && !o->json) {
              fmt_cfg(&rec[nrec - 1], cfg, sizeof(cfg));
              fprintf(stderr, "  %-8s %-40s %8.3f GB/s\n", bc_fmt_size(size, szb, sizeof(szb)), cfg, g);
            }
          }
        }
        client_teardown(&cl);
      }
    }
    if (o->do_lat) {
      cl.rcvbuf_seen[b] = client_setup(&cl, 1, o->sockbufs[b], 64);
      lat[b] = client_lat(&cl);
      client_teardown(&cl);
    }
  }
  ctl_cmd q = {.op = OP_QUIT};
  send_all(ctl, &q, sizeof(q));

  /* per size: the best record overall, and the best per stream count */
  const bw_rec *best[BC_MAX_SIZES] = {0};
  double per_stream[MAX_STREAMS][BC_MAX_SIZES] = {{0}};
  for (size_t i = 0; i < nrec; i++) {
    int z = 0, si = 0;
    while (o->sizes.v[z] != rec[i].size) z++;
    while (o->streams[si] != rec[i].streams) si++;
    if (rec[i].gbps > per_stream[si][z]) per_stream[si][z] = rec[i].gbps;
    if (!best[z] || rec[i].gbps > best[z]->gbps) best[z] = &rec[i];
  }
  int lat_best = 0;
  for (int b = 1; b < o->nsockbufs; b++)
    if (lat[b].ok && lat[b].p50 < lat[lat_best].p50) lat_best = b;

  const char *io = o->io == IO_POLL ? "poll" : "threads";
  if (o->csv) {
    printf("test,size,streams,sockbuf,window,gbps,p50_us,p99_us,min_us,mean_us,msgs\n");
    for (size_t i = 0; i < nrec; i++)
      printf("bw,%zu,%d,%ld,%ld,%.4f,,,,,%llu\n", rec[i].size, rec[i].streams, rec[i].sockbuf, rec[i].window,
             rec[i].gbps, (unsigned long long)rec[i].msgs);
    for (int z = 0; z < nsz; z++)
      if (best[z])
        printf("bw_best,%zu,%d,%ld,%ld,%.4f,,,,,%llu\n", best[z]->size, best[z]->streams, best[z]->sockbuf,
               best[z]->window, best[z]->gbps, (unsigned long long)best[z]->msgs);
    for (int b = 0; b < o->nsockbufs; b++)
      if (lat[b].ok)
        printf("lat,8,1,%ld,,,%.3f,%.3f,%.3f,%.3f,%ld\n", o->sockbufs[b], lat[b].p50, lat[b].p99, lat[b].min,
               lat[b].mean, o->lat_iters);
    if (o->do_lat)
      printf("lat_best,8,1,%ld,,,%.3f,%.3f,%.3f,%.3f,%ld\n", o->sockbufs[lat_best], lat[lat_best].p50,
             lat[lat_best].p99, lat[lat_best].min, lat[lat_best].mean, o->lat_iters);
    free(rec);
    return 0;
  }
  if (o->json) {
    printf("{\"bench\":\"raw_socket\",\"io\":\"%s\",\"nodelay\":%d,\"spin_yield\":%d,\"reps\":%d,\"bandwidth\":[", io,
           o->nodelay, o->spin_yield, o->reps);
    for (size_t i = 0; i < nrec; i++)
      printf("%s{\"size\":%zu,\"streams\":%d,\"sockbuf\":%ld,\"window\":%ld,\"gbps\":%.4f,\"msgs\":%llu}",
             i ? "," : "", rec[i].size, rec[i].streams, rec[i].sockbuf, rec[i].window, rec[i].gbps,
             (unsigned long long)rec[i].msgs);
    printf("],\"best\":[");
    for (int z = 0, first = 1; z < nsz; z++)
      if (best[z]) {
        printf("%s{\"size\":%zu,\"gbps\":%.4f,\"streams\":%d,\"sockbuf\":%ld,\"window\":%ld}", first ? "" : ",",
               best[z]->size, best[z]->gbps, best[z]->streams, best[z]->sockbuf, best[z]->window);
        first = 0;
      }
    printf("],\"latency\":[");
    for (int b = 0, first = 1; b < o->nsockbufs; b++)
      if (lat[b].ok) {
        printf("%s{\"size\":8,\"sockbuf\":%ld,\"p50_us\":%.3f,\"p99_us\":%.3f,\"min_us\":%.3f,\"mean_us\":%.3f,"
               "\"iters\":%ld}",
               first ? "" : ",", o->sockbufs[b], lat[b].p50, lat[b].p99, lat[b].min, lat[b].mean, o->lat_iters);
        first = 0;
      }
    printf("]}\n");
    free(rec);
    return 0;
  }

  printf("# rerail-raw-socket-bench: kernel TCP, io=%s, TCP_NODELAY=%d%s, best of %d run(s) per configuration\n",
         io, o->nodelay, o->spin_yield ? ", spin-yield" : "", o->reps);
  printf("# socket buffers:");
  for (int b = 0; b < o->nsockbufs; b++)
    printf(" %s%s", sockbuf_name(o->sockbufs[b], sb, sizeof(sb)), b + 1 < o->nsockbufs ? "," : "");
  printf("; windows (messages in flight per stream):");
  for (int w = 0; w < o->nwindows; w++) printf(" %ld%s", o->windows[w], w + 1 < o->nwindows ? "," : "");
  printf("; GB/s = 1e9 B/s\n");
  if (o->do_bw) {
    printf("\n## bandwidth (GB/s; per stream count the best over socket buffers and windows)\n%-10s", "size");
    for (int si = 0; si < o->nstreams_list; si++) printf(" %6d str", o->streams[si]);
    printf(" %10s  %s\n", "best", "(config)");
    for (int z = 0; z < nsz; z++) {
      printf("%-10s", bc_fmt_size(o->sizes.v[z], szb, sizeof(szb)));
      for (int si = 0; si < o->nstreams_list; si++) printf(" %10.3f", per_stream[si][z]);
      fmt_cfg(best[z], cfg, sizeof(cfg));
      printf(" %10.3f  (%s)\n", best[z]->gbps, cfg);
    }
  }
  if (o->do_lat) {
    printf("\n## 8-byte round trip, busy-poll ping-pong (us), %ld iterations after %ld warmup\n", o->lat_iters,
           o->lat_warmup);
    printf("%-10s %10s %10s %10s %10s\n", "sockbuf", "p50", "p99", "min", "mean");
    for (int b = 0; b < o->nsockbufs; b++)
      printf("%-10s %10.2f %10.2f %10.2f %10.2f\n", sockbuf_name(o->sockbufs[b], sb, sizeof(sb)), lat[b].p50,
             lat[b].p99, lat[b].min, lat[b].mean);
    printf("best p50: %.2f us (sockbuf %s)\n", lat[lat_best].p50,
           sockbuf_name(o->sockbufs[lat_best], sb, sizeof(sb)));
  }
  free(rec);
  return 0;
}

/* ---- options ---- */
static void usage(FILE *f) {
  fprintf(f,
          "usage: rerail-raw-socket-bench [--fork | --server | --client HOST] [options]\n"
          "  --fork               run server and client on loopback (default)\n"
          "  --server             serve clients on --bind ADDR (default 0.0.0.0) --port P\n"
          "  --client HOST        drive the server on HOST --port P and print results\n"
          "  --port P             control port (default %d; --fork uses an ephemeral one)\n"
          "  --bind ADDR          server address (default 0.0.0.0)\n"
          "  --once               server: exit after one client\n"
          "  --min-size S         smallest message (default 4K)\n"
          "  --max-size S         largest message (default 64M)\n"
          "  --factor 2|4         size step (default 2)\n"
          "  --sizes LIST         explicit sizes, e.g. 4K,64K,1M (overrides the range)\n"
          "  --streams LIST       parallel stream counts (default 1,2,3,4)\n"
          "  --sockbuf LIST       socket buffers: default and/or sizes (default: default,4M)\n"
          "  --window LIST        messages in flight per stream, each tried (default 2,4,16)\n"
          "  --reps N             runs per configuration, the best counts (default 1)\n"
          "  --bytes S            bytes per bandwidth test, all streams (default 256M)\n"
          "  --min-msgs N         minimum messages per stream per test (default 8)\n"
          "  --max-msgs N         maximum messages per stream per test (default 100000)\n"
          "  --io threads|poll    >1 stream: a thread per stream (default) or one thread, poll()\n"
          "  --nodelay 0|1        TCP_NODELAY on bandwidth streams (default 1; latency always 1)\n"
          "  --cc NAME            TCP congestion control of every socket (default: the system's)\n"
          "  --lat-iters N        round trips measured (default 10000)\n"
          "  --lat-warmup N       round trips before measuring (default 1000)\n"
          "  --spin-yield         sched_yield() between empty polls (oversubscribed CPUs)\n"
          "  --no-bw | --no-lat   skip a test\n"
          "  --csv | --json       machine-readable output on stdout\n",
          DEFAULT_PORT);
}

static void parse_list_int(const char *s, int *out, int *n, int max, long lo, long hi) {
  char buf[256];
  *n = 0;
  snprintf(buf, sizeof(buf), "%s", s);
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    long v;
    if (*n == max || bc_parse_int(t, lo, hi, &v)) bc_die("bad list '%s'", s);
    out[(*n)++] = (int)v;
  }
  if (!*n) bc_die("empty list");
}

static void parse_list_long(const char *s, long *out, int *n, int max, long lo, long hi) {
  int tmp[16];
  if (max > 16) max = 16;
  parse_list_int(s, tmp, n, max, lo, hi);
  for (int i = 0; i < *n; i++) out[i] = tmp[i];
}

static void parse_sockbufs(const char *s, options *o) {
  char buf[256];
  o->nsockbufs = 0;
  snprintf(buf, sizeof(buf), "%s", s);
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    size_t v = 0;
    if (o->nsockbufs == MAX_SOCKBUFS) bc_die("too many --sockbuf values");
    if (strcmp(t, "default") && strcmp(t, "0") && (bc_parse_size(t, &v) || v > (1u << 30)))
      bc_die("bad --sockbuf '%s'", t);
    o->sockbufs[o->nsockbufs++] = (long)v;
  }
}

static void parse_options(int argc, char **argv, options *o) {
  size_t min_size = 4096, max_size = 64u << 20;
  long factor = 2;
  const char *sizes = NULL;
  memset(o, 0, sizeof(*o));
  o->mode = MODE_FORK;
  o->port = DEFAULT_PORT;
  o->host = "0.0.0.0";
  parse_list_long("2,4,16", o->windows, &o->nwindows, 8, 1, 1 << 20);
  o->reps = 1;
  o->bytes = 256u << 20;
  o->min_msgs = 8;
  o->max_msgs = 100000;
  o->lat_iters = 10000;
  o->lat_warmup = 1000;
  o->nodelay = 1;
  o->do_bw = o->do_lat = true;
  parse_list_int("1,2,3,4", o->streams, &o->nstreams_list, MAX_STREAMS, 1, MAX_STREAMS);
  parse_sockbufs("default,4M", o);
  enum { O_FORK = 256, O_SERVER, O_CLIENT, O_PORT, O_BIND, O_MIN, O_MAX, O_FACTOR, O_SIZES, O_STREAMS,
         O_SOCKBUF, O_WINDOW, O_BYTES, O_MINMSGS, O_MAXMSGS, O_IO, O_NODELAY, O_LATIT, O_LATWU, O_NOBW,
         O_NOLAT, O_CSV, O_JSON, O_ONCE, O_YIELD, O_REPS, O_CC, O_HELP };
  static const struct option lo[] = {
      {"fork", no_argument, 0, O_FORK},         {"server", no_argument, 0, O_SERVER},
      {"client", required_argument, 0, O_CLIENT}, {"port", required_argument, 0, O_PORT},
      {"bind", required_argument, 0, O_BIND},   {"min-size", required_argument, 0, O_MIN},
      {"max-size", required_argument, 0, O_MAX}, {"factor", required_argument, 0, O_FACTOR},
      {"sizes", required_argument, 0, O_SIZES}, {"streams", required_argument, 0, O_STREAMS},
      {"sockbuf", required_argument, 0, O_SOCKBUF}, {"window", required_argument, 0, O_WINDOW},
      {"bytes", required_argument, 0, O_BYTES}, {"min-msgs", required_argument, 0, O_MINMSGS},
      {"max-msgs", required_argument, 0, O_MAXMSGS}, {"io", required_argument, 0, O_IO},
      {"nodelay", required_argument, 0, O_NODELAY}, {"lat-iters", required_argument, 0, O_LATIT},
      {"lat-warmup", required_argument, 0, O_LATWU}, {"no-bw", no_argument, 0, O_NOBW},
      {"no-lat", no_argument, 0, O_NOLAT},      {"csv", no_argument, 0, O_CSV},
      {"json", no_argument, 0, O_JSON},         {"once", no_argument, 0, O_ONCE},
      {"spin-yield", no_argument, 0, O_YIELD},  {"reps", required_argument, 0, O_REPS},
      {"cc", required_argument, 0, O_CC},       {"help", no_argument, 0, O_HELP},
      {0, 0, 0, 0}};
  int c;
  long v;
  while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
    switch (c) {
    case O_FORK: o->mode = MODE_FORK; break;
    case O_SERVER: o->mode = MODE_SERVER; break;
    case O_CLIENT: o->mode = MODE_CLIENT; o->host = optarg; break;
    case O_PORT: if (bc_parse_int(optarg, 1, 65535, &v)) bc_die("bad --port"); o->port = (int)v; break;
    case O_BIND: o->host = optarg; break;
    case O_MIN: if (bc_parse_size(optarg, &min_size)) bc_die("bad --min-size"); break;
    case O_MAX: if (bc_parse_size(optarg, &max_size)) bc_die("bad --max-size"); break;
    case O_FACTOR: if (bc_parse_int(optarg, 2, 4, &factor) || factor == 3) bc_die("--factor is 2 or 4"); break;
    case O_SIZES: sizes = optarg; break;
    case O_STREAMS: parse_list_int(optarg, o->streams, &o->nstreams_list, MAX_STREAMS, 1, MAX_STREAMS); break;
    case O_SOCKBUF: parse_sockbufs(optarg, o); break;
    case O_WINDOW: parse_list_long(optarg, o->windows, &o->nwindows, 8, 1, 1 << 20); break;
    case O_REPS: if (bc_parse_int(optarg, 1, 1000, &v)) bc_die("bad --reps"); o->reps = (int)v; break;
    case O_BYTES: if (bc_parse_size(optarg, &o->bytes)) bc_die("bad --bytes"); break;
    case O_MINMSGS: if (bc_parse_int(optarg, 1, 1L << 40, &o->min_msgs)) bc_die("bad --min-msgs"); break;
    case O_MAXMSGS: if (bc_parse_int(optarg, 1, 1L << 40, &o->max_msgs)) bc_die("bad --max-msgs"); break;
    case O_IO:
      if (!strcmp(optarg, "threads")) o->io = IO_THREADS;
      else if (!strcmp(optarg, "poll")) o->io = IO_POLL;
      else bc_die("--io is threads or poll");
      break;
    case O_NODELAY: if (bc_parse_int(optarg, 0, 1, &v)) bc_die("bad --nodelay"); o->nodelay = (int)v; break;
    case O_CC:
      if (strlen(optarg) >= sizeof g_cc) bc_die("bad --cc: %s", optarg);
      strcpy(g_cc, optarg);
      break;
    case O_LATIT: if (bc_parse_int(optarg, 1, 100000000, &o->lat_iters)) bc_die("bad --lat-iters"); break;
    case O_LATWU: if (bc_parse_int(optarg, 0, 100000000, &o->lat_warmup)) bc_die("bad --lat-warmup"); break;
    case O_NOBW: o->do_bw = false; break;
    case O_NOLAT: o->do_lat = false; break;
    case O_CSV: o->csv = true; break;
    case O_JSON: o->json = true; break;
    case O_ONCE: o->once = true; break;
    case O_YIELD: o->spin_yield = 1; break;
    case O_HELP: case 'h': usage(stdout); exit(0);
    default: usage(stderr); exit(2);
    }
  }
  if (optind != argc) { usage(stderr); exit(2); }
  if (o->csv && o->json) bc_die("--csv and --json are exclusive");
  if (o->min_msgs > o->max_msgs) bc_die("--min-msgs > --max-msgs");
  if (sizes ? bc_sizes_list(&o->sizes, sizes) : bc_sizes_range(&o->sizes, min_size, max_size, (unsigned)factor))
    bc_die("bad size sweep");
  if (bc_sizes_max(&o->sizes) < 16 && o->do_bw) bc_die("bandwidth sizes must be >= 16 bytes");
}

int main(int argc, char **argv) {
  options o;
  bc_set_prog(argv[0]);
  parse_options(argc, argv, &o);
  signal(SIGPIPE, SIG_IGN);

  if (o.mode == MODE_SERVER) {
    struct sockaddr_storage a;
    socklen_t al;
    int port;
    if (resolve(o.host, o.port, &a, &al)) bc_die("cannot resolve %s", o.host);
    int lfd = listen_on(&a, al, o.port, 0, &port);
    if (lfd < 0) bc_die("listen on %s:%d: %s", o.host, o.port, strerror(errno));
    fprintf(stderr, "rerail-raw-socket-bench: serving on %s:%d\n", o.host, port);
    do {
      int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
      if (c < 0) continue;
      server_session(c, &o);
      close(c);
    } while (!o.once);
    return 0;
  }

  if (o.mode == MODE_CLIENT) {
    struct sockaddr_storage a;
    socklen_t al;
    if (resolve(o.host, o.port, &a, &al)) bc_die("cannot resolve %s", o.host);
    int ctl = connect_to(&a, al, o.port, 0);
    if (ctl < 0) bc_die("connect %s:%d: %s", o.host, o.port, strerror(errno));
    set_int_opt(ctl, IPPROTO_TCP, TCP_NODELAY, 1);
    return client_main(&o, ctl, &a, al);
  }

  /* --fork: the child serves, the parent is the client and prints. */
  struct sockaddr_storage a;
  socklen_t al;
  int port;
  if (resolve("127.0.0.1", 0, &a, &al)) bc_die("cannot resolve 127.0.0.1");
  int lfd = listen_on(&a, al, 0, 0, &port);
  if (lfd < 0) bc_die("listen on loopback: %s", strerror(errno));
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) bc_die("fork: %s", strerror(errno));
  if (pid == 0) {
    int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0) _exit(1);
    close(lfd);
    set_int_opt(c, IPPROTO_TCP, TCP_NODELAY, 1);
    server_session(c, &o);
    _exit(0);
  }
  close(lfd);
  int ctl = connect_to(&a, al, port, 0);
  if (ctl < 0) {
    kill(pid, SIGKILL);
    bc_die("connect to forked server: %s", strerror(errno));
  }
  set_int_opt(ctl, IPPROTO_TCP, TCP_NODELAY, 1);
  int rc = client_main(&o, ctl, &a, al);
  close(ctl);
  int st;
  waitpid(pid, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st)) {
    bc_warn("server process failed");
    rc = 1;
  }
  return rc;
}
