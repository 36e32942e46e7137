/* Bad-input modes. Each prints one verdict line per case and returns the exit
 * code: 0 when the plugin behaved, 1 when it did not.
 *
 * --bad-handle: connect() with garbage handles (all zero, all 0xff, random).
 *   Expected: an error return (at the latest when the plugin's connect
 *   timeout expires), no crash, and no single call blocking. A connect that
 *   keeps answering "call again" forever would hang NCCL, so it fails after
 *   --bad-bound seconds. If connect does hand out a comm, its first send must
 *   fail.
 * --wrong-token: the client first connects with a corrupted copy of the
 *   server's genuine handle (bytes 8..15 flipped, or every byte except the
 *   listen address); the server must never return that connection from
 *   accept() nor fail the listener over it; either the client's operations
 *   fail or the server logs a refusal. Then a genuine connection on the same
 *   listener must carry a checked schedule. */
#include "harness.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

/* Try a send on a comm that should not work; returns 1 if it failed, 0 if it
 * completed, -1 if it neither failed nor completed within bound_s. */
static int probe_send(hnet *n, void *comm, double bound_s, char *what, size_t len) {
  static char buf[4096];
  void *mh = NULL;
  int rc = H_CALL(A_REGMR, n->reg_mr(n, comm, buf, sizeof buf, HNET_PTR_HOST, &mh));
  if (rc != HNET_SUCCESS) {
    snprintf(what, len, "regMr returned %s", hnet_result_str(rc));
    return 1;
  }
  double t0 = h_now();
  void *req = NULL;
  int result = -1;
  snprintf(what, len, "isend never got a request within %.0f s", bound_s);
  while (h_now() - t0 < bound_s) {
    if (!req) {
      rc = H_CALL(A_ISEND, n->isend(n, comm, buf, sizeof buf, 0x100, mh, &req));
      if (rc != HNET_SUCCESS) {
        snprintf(what, len, "isend returned %s after %.3f s", hnet_result_str(rc), h_now() - t0);
        result = 1;
        break;
      }
      if (!req) {
        sleep_us(1000);
        continue;
      }
      snprintf(what, len, "the send neither failed nor completed within %.0f s", bound_s);
    }
    int done = 0, sz = 0;
    rc = H_CALL(A_TEST, n->test_raw(n, req, &done, &sz));
    if (rc != HNET_SUCCESS) {
      snprintf(what, len, "test returned %s after %.3f s", hnet_result_str(rc), h_now() - t0);
      result = 1;
      break;
    }
    if (done) {
      snprintf(what, len, "a 4 KiB send completed after %.3f s", h_now() - t0);
      result = 0;
      break;
    }
    sleep_us(1000);
  }
  rc = H_CALL(A_DEREGMR, n->dereg_mr(n, comm, mh));
  if (rc != HNET_SUCCESS) h_info("deregMr on the bad comm returned %s", hnet_result_str(rc));
  return result;
}

/* Drive connect() with a handle until it errors, returns a comm or bound_s
 * passes. Returns 1 on error return, 0 with *comm set, -1 on timeout. */
static int connect_until(hnet *n, void *handle, double bound_s, void **comm, int *rc_out, double *dt,
                         int *blocked) {
  double t0 = h_now();
  *comm = NULL;
  *blocked = 0;
  for (;;) {
    uint64_t c0 = h_now_ns();
    int rc = n->connect(n, g_opt.dev, handle, comm);
    uint64_t ns = h_now_ns() - c0;
    h_note_call(A_CONNECT, ns);
    if ((double)ns * 1e-9 > g_opt.max_call_s) *blocked = 1;
    *dt = h_now() - t0;
    if (rc != HNET_SUCCESS) {
      *rc_out = rc;
      *comm = NULL;
      return 1;
    }
    if (*comm) return 0;
    if (*dt > bound_s) return -1;
    sleep_us(200);
  }
}

static int bad_handle_case(hnet *n, const char *label, const unsigned char *bytes) {
  unsigned char h[HNET_HANDLE_SIZE];
  memcpy(h, bytes, sizeof h);
  void *comm;
  int rc = 0, blocked;
  double dt;
  unsigned long w0 = hnet_log_count(2);
  int r = connect_until(n, h, g_opt.bad_bound, &comm, &rc, &dt, &blocked);
  char warn[512];
  hnet_last_warning(warn, sizeof warn);
  int warned = hnet_log_count(2) > w0;
  int pass = 0;
  if (r == 1) {
    printf("bad-handle[%s]: %s: connect returned %s after %.3f s%s%s%s\n", label, blocked ? "FAIL" : "PASS",
           hnet_result_str(rc), dt, warned ? "; plugin warned: " : "; no warning logged",
           warned ? warn : "", blocked ? "; but a single connect call blocked" : "");
    pass = !blocked;
  } else if (r == 0) {
    char what[256];
    int s = probe_send(n, comm, 10, what, sizeof what);
    int crc = H_CALL(A_CLOSE, n->close_send(n, comm));
    pass = s == 1 && !blocked;
    printf("bad-handle[%s]: %s: connect returned a comm after %.3f s; then %s; closeSend returned %s\n", label,
           pass ? "PASS" : "FAIL", dt, what, hnet_result_str(crc));
  } else {
    printf("bad-handle[%s]: FAIL: connect kept returning a NULL comm for %.0f s (NCCL would retry forever: "
           "a garbage handle must end in an error)\n", label, g_opt.bad_bound);
  }
  fflush(stdout);
  return pass;
}

int h_mode_bad_handle(hnet *n) {
  unsigned char b[HNET_HANDLE_SIZE];
  int ok = 1;
  memset(b, 0, sizeof b);
  ok &= bad_handle_case(n, "zeros", b);
  memset(b, 0xff, sizeof b);
  ok &= bad_handle_case(n, "0xff", b);
  uint64_t x = g_opt.seed;
  for (size_t i = 0; i < sizeof b; i++) {
    x = h_mix64(x + i);
    b[i] = (unsigned char)x;
  }
  ok &= bad_handle_case(n, "random", b);
  printf("bad-handle: %s\n", ok ? "PASS" : "FAIL");
  return ok ? H_EXIT_OK : H_EXIT_FAIL;
}

/* ---- wrong token ---------------------------------------------------------- */

/* Mark the bytes of every local address found in the handle (with the
 * sockaddr around it when the family field is there). */
static int find_addresses(const unsigned char *h, unsigned char keep[HNET_HANDLE_SIZE], char *desc, size_t len) {
  struct ifaddrs *ifs = NULL, *i;
  int found = 0;
  size_t d = 0;
  desc[0] = 0;
  if (getifaddrs(&ifs)) return 0;
  for (i = ifs; i; i = i->ifa_next) {
    if (!i->ifa_addr) continue;
    int fam = i->ifa_addr->sa_family;
    const unsigned char *a;
    size_t alen, pre, post;
    if (fam == AF_INET) {
      a = (const unsigned char *)&((struct sockaddr_in *)i->ifa_addr)->sin_addr;
      alen = 4, pre = 4, post = 8;
    } else if (fam == AF_INET6) {
      a = (const unsigned char *)&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
      alen = 16, pre = 8, post = 4;
    } else {
      continue;
    }
    for (size_t j = 0; j + alen <= HNET_HANDLE_SIZE; j++) {
      if (memcmp(h + j, a, alen)) continue;
      size_t lo, hi;
      uint16_t f = 0;
      if (j >= pre) memcpy(&f, h + j - pre, 2);
      if (j >= pre && f == fam) lo = j - pre, hi = j + alen + post;   /* a whole sockaddr */
      else lo = j >= 4 ? j - 4 : 0, hi = j + alen + 2;                 /* a family tag before, a port after */
      if (hi > HNET_HANDLE_SIZE) hi = HNET_HANDLE_SIZE;
      for (size_t k = lo; k < hi; k++) keep[k] = 1;
      found = 1;
      d += (size_t)snprintf(desc + d, d < len ? len - d : 0, "%s%s at %zu (kept %zu..%zu)", d ? ", " : "",
                            i->ifa_name, j, lo, hi - 1);
    }
  }
  freeifaddrs(ifs);
  return found;
}

/* The TCP ports this process listens on: sockets in /proc/self/fd matched
 * against the LISTEN entries of /proc/net/tcp and tcp6. */
static int listening_ports(int *ports, int max) {
  unsigned long inodes[256];
  int ninodes = 0, nports = 0;
  DIR *d = opendir("/proc/self/fd");
  if (!d) return 0;
  struct dirent *e;
  while ((e = readdir(d)) && ninodes < 256) {
    char path[300], link[64];
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t l = readlink(path, link, sizeof link - 1);
    if (l <= 0) continue;
    link[l] = 0;
    unsigned long ino;
    if (sscanf(link, "socket:[%lu]", &ino) == 1) inodes[ninodes++] = ino;
  }
  closedir(d);
  const char *files[] = {"/proc/net/tcp", "/proc/net/tcp6"};
  for (int f = 0; f < 2; f++) {
    FILE *fp = fopen(files[f], "r");
    if (!fp) continue;
    char line[512];
    if (!fgets(line, sizeof line, fp)) {
      fclose(fp);
      continue;
    }
    while (fgets(line, sizeof line, fp) && nports < max) {
      char local[128];
      unsigned st;
      unsigned long ino;
      if (sscanf(line, " %*d: %127s %*s %x %*s %*s %*s %*d %*d %lu", local, &st, &ino) != 3) continue;
      if (st != 0x0A) continue;   /* LISTEN */
      char *colon = strrchr(local, ':');
      if (!colon) continue;
      for (int i = 0; i < ninodes; i++)
        if (inodes[i] == ino) {
          ports[nports++] = (int)strtol(colon + 1, NULL, 16);
          break;
        }
    }
    fclose(fp);
  }
  return nports;
}

/* Mark where the listener's ports sit in the handle (either byte order). */
static void find_ports(const unsigned char *h, const char *ports, unsigned char keep[HNET_HANDLE_SIZE],
                       char *desc, size_t len) {
  size_t d = strlen(desc);
  char tmp[256];
  snprintf(tmp, sizeof tmp, "%s", ports);
  for (char *save = NULL, *t = strtok_r(tmp, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
    int p = atoi(t);
    if (p <= 0 || p > 65535) continue;
    unsigned char be[2] = {(unsigned char)(p >> 8), (unsigned char)p};
    unsigned char le[2] = {(unsigned char)p, (unsigned char)(p >> 8)};
    for (size_t j = 0; j + 2 <= HNET_HANDLE_SIZE; j++)
      if (!memcmp(h + j, be, 2) || !memcmp(h + j, le, 2)) {
        keep[j] = keep[j + 1] = 1;
        d += (size_t)snprintf(desc + d, d < len ? len - d : 0, ", port %d at %zu", p, j);
      }
  }
}

static int parse_keep(const char *spec, unsigned char keep[HNET_HANDLE_SIZE]) {
  char tmp[128];
  snprintf(tmp, sizeof tmp, "%s", spec);
  for (char *save = NULL, *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    unsigned off, n;
    if (sscanf(t, "%u:%u", &off, &n) != 2 || off + n > HNET_HANDLE_SIZE) return -1;
    for (unsigned k = off; k < off + n; k++) keep[k] = 1;
  }
  return 0;
}

static int forge(unsigned char *h, char *desc, size_t len) {
  if (g_opt.wrong_token == H_WT_TOKEN) {
    for (int i = 8; i < 16; i++) h[i] ^= 0xff;
    snprintf(desc, len, "bytes 8..15 flipped");
    return 0;
  }
  unsigned char keep[HNET_HANDLE_SIZE] = {0};
  char where[512];
  if (g_opt.keep_bytes[0]) {
    if (parse_keep(g_opt.keep_bytes, keep)) {
      h_error("bad --keep-bytes '%s' (OFF:LEN[,OFF:LEN] inside %d bytes)", g_opt.keep_bytes, HNET_HANDLE_SIZE);
      return -1;
    }
    snprintf(where, sizeof where, "--keep-bytes %s", g_opt.keep_bytes);
  } else if (!find_addresses(h, keep, where, sizeof where)) {
    h_error("no local address found inside the handle: pass --keep-bytes OFF:LEN to say where it is");
    return -1;
  } else {
    char ports[256] = "";
    h_rdv_read_flag(H_SERVER, "ports", ports, sizeof ports);
    find_ports(h, ports, keep, where, sizeof where);
  }
  for (int i = 0; i < HNET_HANDLE_SIZE; i++)
    if (!keep[i]) h[i] ^= 0xff;
  snprintf(desc, len, "every byte flipped except the address (%s)", where);
  return 0;
}

static const char *variant(void) { return g_opt.wrong_token == H_WT_TOKEN ? "token" : "all-but-addr"; }

static int accept_watch(hnet *n, void *listen, double until_flag_then_s, int *accepted, int *failed) {
  double extra_end = 0;
  for (;;) {
    void *comm = NULL;
    uint64_t t0 = h_now_ns();
    int rc = n->accept(n, listen, &comm);
    uint64_t ns = h_now_ns() - t0;
    h_note_call(A_ACCEPT, ns);
    if ((double)ns * 1e-9 > g_opt.max_call_s)
      h_error("wrong-token[%s]: a single accept() call blocked for %.3f s", variant(), (double)ns * 1e-9);
    if (rc != HNET_SUCCESS) {
      h_error("wrong-token[%s]: accept() returned %s while a forged connection arrived: a stray connection "
              "must be dropped, not fail the listener (NCCL would abort the communicator)", variant(),
              hnet_result_str(rc));
      *failed = 1;
      return -1;
    }
    if (comm) {
      h_error("wrong-token[%s]: accept() returned a connection made with a forged handle", variant());
      *accepted = 1;
      int crc = H_CALL(A_CLOSE, n->close_recv(n, comm));
      if (crc) h_info("closeRecv on the forged connection returned %s", hnet_result_str(crc));
      return -1;
    }
    if (!extra_end && h_rdv_has_flag(H_CLIENT, "forged-done")) extra_end = h_now() + until_flag_then_s;
    if (extra_end && h_now() > extra_end) return 0;
    if (h_peer_aborted()) {
      h_error("wrong-token[%s]: the client aborted", variant());
      return -1;
    }
    sleep_us(200);
  }
}

static h_conn g_wt;   /* the genuine connection */

static int wt_traffic(hnet *n, int is_send) {
  h_conn *c = &g_wt;
  c->is_send = is_send;
  c->net = n;
  c->last = g_opt.iters - 1;
  h_sched_init(&c->sched, g_opt.seed, 1, 0, h_resolved_group(), g_opt.min_size, g_opt.max_size, 0);
  if (h_conn_alloc(c) || h_conn_register(c)) return -1;
  h_watchdog_phase("wrong-token: genuine traffic");
  h_conn *one = c;
  int rc = h_drive(&one, 1);
  if (!rc) {
    h_rdv_put_flag(g_opt.role, "sched-done", NULL);
    int w = h_rdv_wait_flag(1 - g_opt.role, "sched-done", g_opt.timeout);
    if (w) {
      h_error("the peer never finished the genuine schedule");
      rc = -1;
    }
  } else {
    h_rdv_put_flag(g_opt.role, "abort", "genuine traffic failed");
  }
  return rc;
}

static int wt_server(hnet *n, const h_params *params) {
  unsigned char handle[HNET_HANDLE_SIZE];
  void *listen = NULL;
  int rc = H_CALL(A_LISTEN, n->listen(n, g_opt.dev, handle, &listen));
  if (rc != HNET_SUCCESS || !listen) {
    h_error("listen() returned %s", hnet_result_str(rc));
    return H_EXIT_FAIL;
  }
  /* the listener's ports, so that the client can keep them intact */
  int ports[16], np = listening_ports(ports, 16);
  char plist[256] = "";
  for (int i = 0, o = 0; i < np; i++) o += snprintf(plist + o, sizeof plist - (size_t)o, "%s%d", i ? " " : "", ports[i]);
  h_rdv_put_flag(H_SERVER, "ports", plist);
  if (h_rdv_put_handle(H_SERVER, 0, handle, params)) return H_EXIT_FAIL;
  unsigned long w0 = hnet_log_count(2);
  int accepted = 0, failed = 0;
  h_watchdog_phase("wrong-token: accepting while the forged connection arrives");
  /* until the client is done with its forged attempt, and 1 s more */
  if (accept_watch(n, listen, 1.0, &accepted, &failed)) {
    printf("wrong-token[%s]: FAIL (%s)\n", variant(),
           accepted ? "the forged connection was accepted" : failed ? "accept failed" : "aborted");
    h_rdv_put_flag(H_SERVER, "abort", "forged connection accepted");
    H_CALL(A_CLOSE, n->close_listen(n, listen));
    return H_EXIT_FAIL;
  }
  char client_note[512] = "";
  h_rdv_read_flag(H_CLIENT, "forged-done", client_note, sizeof client_note);
  unsigned long warned = hnet_log_count(2) - w0;
  char warn[512];
  hnet_last_warning(warn, sizeof warn);
  int client_failed = strstr(client_note, "client-failed=1") != NULL;
  h_rdv_put_flag(H_SERVER, "ready-genuine", NULL);

  /* the genuine connection, on the same listener */
  h_watchdog_phase("wrong-token: accepting the genuine connection");
  double t0 = h_now();
  void *comm = NULL;
  while (!comm) {
    rc = H_CALL(A_ACCEPT, n->accept(n, listen, &comm));
    if (rc != HNET_SUCCESS) {
      h_error("accept() of the genuine connection returned %s", hnet_result_str(rc));
      break;
    }
    if (h_now() - t0 > g_opt.rdv_timeout || h_peer_aborted()) {
      h_error("the genuine connection never arrived");
      break;
    }
    if (!comm) sleep_us(200);
  }
  H_CALL(A_CLOSE, n->close_listen(n, listen));
  int traffic_ok = 0;
  if (comm) {
    g_wt.comm = comm;
    traffic_ok = wt_traffic(n, 0) == 0;
  }
  h_conn_release(&g_wt);
  int refused = client_failed || warned > 0;
  int pass = traffic_ok && refused && atomic_load(&g_cnt.errors) == 0;
  printf("wrong-token[%s]: %s: forged connection never accepted; client: %s; server warnings during the "
         "attempt: %lu%s%s; genuine connection %s (%llu msgs, %llu bytes checked)\n",
         variant(), pass ? "PASS" : "FAIL", client_note[0] ? client_note : "(no report)", warned,
         warned ? ", last: " : "", warned ? warn : "", traffic_ok ? "worked" : "FAILED",
         (unsigned long long)g_wt.st.msgs, (unsigned long long)g_wt.st.bytes);
  if (!refused)
    printf("wrong-token[%s]: neither did the client's operations fail nor did the server log a refusal\n",
           variant());
  return pass ? H_EXIT_OK : H_EXIT_FAIL;
}

static int wt_client(hnet *n, const h_params *params) {
  unsigned char genuine[HNET_HANDLE_SIZE], forged[HNET_HANDLE_SIZE];
  h_watchdog_phase("wrong-token: reading the server's handle");
  if (h_rdv_get_handle(H_SERVER, 0, genuine, params, g_opt.rdv_timeout)) return H_EXIT_FAIL;
  memcpy(forged, genuine, sizeof forged);
  char desc[768], note[1024];
  if (forge(forged, desc, sizeof desc)) {
    h_rdv_put_flag(H_CLIENT, "abort", "cannot forge");
    return H_EXIT_FAIL;
  }
  h_info("wrong-token[%s]: connecting with a forged handle: %s", variant(), desc);
  h_watchdog_phase("wrong-token: connecting with the forged handle");
  void *comm;
  int rc = 0, blocked;
  double dt;
  int r = connect_until(n, forged, 15, &comm, &rc, &dt, &blocked);
  int client_failed = 0;
  if (r == 1) {
    client_failed = 1;
    snprintf(note, sizeof note, "client-failed=1 connect returned %s after %.3f s", hnet_result_str(rc), dt);
  } else if (r == 0) {
    char what[256];
    int s = probe_send(n, comm, 5, what, sizeof what);
    client_failed = s == 1;
    int crc = H_CALL(A_CLOSE, n->close_send(n, comm));
    snprintf(note, sizeof note, "client-failed=%d connect returned a comm after %.3f s; then %s; closeSend %s",
             client_failed, dt, what, hnet_result_str(crc));
  } else {
    snprintf(note, sizeof note, "client-failed=0 connect still returned NULL after 15 s");
  }
  if (blocked) {
    h_error("wrong-token[%s]: a single connect() call blocked longer than %.3f s", variant(), g_opt.max_call_s);
  }
  h_info("wrong-token[%s]: %s", variant(), note);
  h_rdv_put_flag(H_CLIENT, "forged-done", note);
  h_watchdog_phase("wrong-token: waiting for the server");
  int w = h_rdv_wait_flag(H_SERVER, "ready-genuine", g_opt.rdv_timeout);
  if (w) {
    printf("wrong-token[%s]: FAIL (the server %s)\n", variant(), w == -2 ? "reported a failure" : "never got ready");
    return H_EXIT_FAIL;
  }
  h_watchdog_phase("wrong-token: genuine connect");
  memcpy(g_wt.handle, genuine, sizeof genuine);
  g_wt.is_send = 1;
  if (h_connect_all(n, &g_wt, 1, NULL, 0)) return H_EXIT_FAIL;
  int ok = wt_traffic(n, 1) == 0;
  h_conn_release(&g_wt);
  ok = ok && atomic_load(&g_cnt.errors) == 0;
  printf("wrong-token[%s] client: %s (%s; genuine connection %s)\n", variant(), ok ? "PASS" : "FAIL", note,
         ok ? "worked" : "FAILED");
  return ok ? H_EXIT_OK : H_EXIT_FAIL;
}

int h_mode_wrong_token(hnet *n) {
  h_params params;
  h_params_from_opts(&params, h_resolved_group());
  h_rdv_clean(g_opt.role);
  g_wt.net = n;
  return g_opt.role == H_SERVER ? wt_server(n, &params) : wt_client(n, &params);
}
