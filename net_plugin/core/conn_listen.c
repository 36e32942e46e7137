/* listen(): one listening socket on each distinct setup address of the
 * pooled NICs, all on one port, and the handle that names them with this
 * listener's secret. What arrives on those sockets is conn_accept.c's. */
#include "core_internal.h"
#include "rr_log.h"

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* This process's identity in its handles (handle.h): random, so that two
 * processes on one host differ, and drawn again after a fork, so that a
 * child's listeners are not taken for its parent's. A connector counts an
 * authenticated answer from any listener of it as progress of every
 * connection to it (peer_progress.h). */
static rr_status listener_process(uint8_t out[RR_HANDLE_PROCESS_LEN]) {
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  static uint8_t id[RR_HANDLE_PROCESS_LEN];
  static pid_t owner;
  static const uint8_t none[RR_HANDLE_PROCESS_LEN];
  rr_status st = RR_OK;
  pthread_mutex_lock(&lock);
  while (st == RR_OK && (owner != getpid() || !memcmp(id, none, sizeof none))) {
    st = rr_hs_random(id, sizeof id);
    owner = getpid();
  }
  if (st == RR_OK) memcpy(out, id, sizeof id);
  pthread_mutex_unlock(&lock);
  return st;
}

/* A listening socket on addr, port *port (0: any, and *port says which).
 * 0, or the errno of what failed. */
static int listen_on(const struct sockaddr_storage *addr, uint16_t *port, int *out) {
  struct sockaddr_storage a = *addr;
  socklen_t alen = a.ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
  if (a.ss_family == AF_INET) ((struct sockaddr_in *)&a)->sin_port = htons(*port);
  else ((struct sockaddr_in6 *)&a)->sin6_port = htons(*port);
  int fd = socket(a.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  struct sockaddr_storage bound;
  socklen_t blen = sizeof bound;
  if (bind(fd, (struct sockaddr *)&a, alen) != 0 || listen(fd, 512) != 0 ||
      (!*port && getsockname(fd, (struct sockaddr *)&bound, &blen) != 0)) {
    int err = errno;
    close(fd);
    return err;
  }
  if (!*port)
    *port = ntohs(bound.ss_family == AF_INET ? ((struct sockaddr_in *)&bound)->sin_port
                                             : ((struct sockaddr_in6 *)&bound)->sin6_port);
  *out = fd;
  return 0;
}

int rr_same_ip(const struct sockaddr_storage *a, const struct sockaddr_storage *b) {
  if (a->ss_family != b->ss_family) return 0;
  if (a->ss_family == AF_INET)
    return ((const struct sockaddr_in *)a)->sin_addr.s_addr == ((const struct sockaddr_in *)b)->sin_addr.s_addr;
  return a->ss_family == AF_INET6 &&
         !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)b)->sin6_addr, 16);
}

/* One listening socket per distinct setup address of the handle's entries
 * (a TCP device's own address; the out-of-band address that every RDMA
 * device's entry shares), all on one port (the handle has room for one).
 * Never the wildcard address: only the paths rerail pools can reach it. A
 * NIC that is down keeps its IPv4 address and is listened on like any (its
 * rails are reopened when it heals); one whose address is gone (an IPv6
 * address flushed with the link, a lost lease) is left out of the handle,
 * so the entries are cut down to the addresses listened on. */
static rr_status bind_all(rr_listen_comm *l, rr_handle_entry *e, int *n, uint16_t *port) {
  for (int attempt = 0; attempt < 16; attempt++) {
    uint16_t want = 0;
    int err = 0, bad = -1, gone[RR_HANDLE_MAX_ADDRS] = {0};
    for (int i = 0; i < *n; i++) {
      int seen = 0;
      for (int k = 0; k < i; k++) seen |= rr_same_ip(&e[k].addr, &e[i].addr);
      if (seen) continue;
      int fd = -1;
      err = listen_on(&e[i].addr, &want, &fd);
      if (err == EADDRNOTAVAIL) {
        RR_INFO(RR_SUB_NET, "listen: the setup address of %s is gone: left out of this listener",
                rr_core_devices()->nif[e[i].dev].name);
        gone[i] = 1;
        continue;
      }
      if (err) {
        bad = i;
        break;
      }
      l->fds[l->nfds++] = fd;
    }
    int kept = 0;
    for (int i = 0; bad < 0 && i < *n; i++) {
      int lost = 0;
      for (int k = 0; k <= i; k++) lost |= gone[k] && rr_same_ip(&e[k].addr, &e[i].addr);
      if (!lost) e[kept++] = e[i];
    }
    if (bad < 0 && kept > 0) {
      *n = kept;
      *port = want;
      return RR_OK;
    }
    while (l->nfds) close(l->fds[--l->nfds]);
    if (bad < 0) {
      RR_WARN("listen: no pooled NIC has its address: nothing to listen on");
      return RR_ERR_SYSTEM;
    }
    /* Another socket holds the port chosen on one of the other addresses:
     * try another port. Anything else will not get better. */
    if (err != EADDRINUSE || !want) {
      char abuf[64];
      RR_WARN("listen: bind/listen on %s: %s", rr_sockaddr_str((const struct sockaddr *)&e[bad].addr, abuf, sizeof abuf),
              strerror(err));
      return RR_ERR_SYSTEM;
    }
  }
  RR_WARN("listen: no port is free on every pooled address");
  return RR_ERR_SYSTEM;
}

rr_status rr_net_listen(rr_net_ctx *ctx, int dev, void *handle, rr_listen_comm **out) {
  const rr_devices *d = rr_core_devices();
  if (!handle || !out) return RR_ERR_INVALID;
  if (dev < 0 || dev >= d->count) {
    RR_WARN("listen: device %d does not exist (%d devices)", dev, d->count);
    return RR_ERR_INVALID;
  }
  rr_handle_entry e[RR_HANDLE_MAX_ADDRS];
  int n = 0, own = 0;
  const struct sockaddr_storage *a0 = rr_core_setup_addr(dev, &own);
  if (!a0) {
    RR_WARN("listen: device %s has no address to set connections up over (no out-of-band "
            "interface: see RERAIL_SOCKET_IFNAME)", d->nif[dev].name);
    return RR_ERR_SYSTEM;
  }
  rr_listen_comm *l = calloc(1, sizeof *l);
  if (!l) return RR_ERR_NOMEM;
  /* The listening device first, then the others whose setup address has
   * its family: backup rails reach us through them. */
  e[n++] = (rr_handle_entry){.addr = *a0, .dev = (uint8_t)dev, .own_ip = (uint8_t)own};
  for (int i = 0; i < d->count && n < RR_HANDLE_MAX_ADDRS; i++) {
    const struct sockaddr_storage *a = i == dev ? NULL : rr_core_setup_addr(i, &own);
    if (!a || a->ss_family != a0->ss_family) continue;
    int nips = 0; /* the handle has room for RR_HANDLE_MAX_IPS distinct addresses */
    for (int k = 0; k < n; k++) {
      int first = 1;
      for (int j = 0; j < k; j++) first &= !rr_same_ip(&e[j].addr, &e[k].addr);
      nips += first;
    }
    int known = 0;
    for (int k = 0; k < n; k++) known |= rr_same_ip(&e[k].addr, a);
    if (!known && nips == RR_HANDLE_MAX_IPS) continue;
    e[n++] = (rr_handle_entry){.addr = *a, .dev = (uint8_t)i, .own_ip = (uint8_t)own};
  }
  uint16_t port = 0;
  uint8_t process[RR_HANDLE_PROCESS_LEN];
  rr_status st = rr_hs_random(l->secret, sizeof l->secret);
  if (st == RR_OK) st = listener_process(process);
  if (st == RR_OK) st = bind_all(l, e, &n, &port);
  if (st != RR_OK) {
    free(l);
    return st;
  }
  for (int i = 0; i < n; i++) l->addr_dev[i] = e[i].dev, l->entry_addr[i] = e[i].addr;
  l->naddrs = n;
  l->magic = RR_MAGIC_LISTEN;
  l->profiler = ctx ? ctx->profiler : NULL;
  l->traffic_class = ctx ? ctx->traffic_class : -1;
  l->dev = dev;
  pthread_mutex_init(&l->lock, NULL);
  st = rr_handle_encode(e, n, port, l->secret, process, handle);
  if (st != RR_OK) {
    rr_net_close_listen(l);
    return st;
  }
  char abuf[64];
  /* entry 0 is the listening device's unless its address is gone now. */
  RR_INFO(RR_SUB_NET | RR_SUB_INIT, "listening for %s on %s and %d more device(s), %d address(es), port %u",
          d->nif[l->addr_dev[0]].name, rr_sockaddr_str((const struct sockaddr *)&e[0].addr, abuf, sizeof abuf),
          n - 1, l->nfds, port);
  *out = l;
  return RR_OK;
}
