/* The out-of-band channel of rerail-net-bench (bench_oob.h). */
#include "bench_oob.h"
#include "bench_common.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

oob g_oob;

void oob_send(const void *buf, size_t len) {
  if (g_oob.fd >= 0) {
    const char *p = buf;
    while (len) {
      ssize_t r = write(g_oob.fd, p, len);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) bc_die("out-of-band channel: peer gone");
      p += r;
      len -= (size_t)r;
    }
    return;
  }
  char tmp[4096], path[4096];
  snprintf(tmp, sizeof(tmp), "%s/.m-%d-%llu.tmp", g_oob.dir, g_oob.rank, (unsigned long long)g_oob.sseq);
  snprintf(path, sizeof(path), "%s/m-%d-%llu", g_oob.dir, g_oob.rank, (unsigned long long)g_oob.sseq);
  g_oob.sseq++;
  FILE *f = fopen(tmp, "wb");
  if (!f || fwrite(buf, 1, len, f) != len || fclose(f)) bc_die("out-of-band file %s: %s", tmp, strerror(errno));
  if (rename(tmp, path)) bc_die("rename %s: %s", path, strerror(errno));
}

void oob_recv(void *buf, size_t len) {
  uint64_t deadline = bc_now_ns() + (uint64_t)(g_oob.timeout_s * 1e9);
  if (g_oob.fd >= 0) {
    char *p = buf;
    while (len) {
      ssize_t r = read(g_oob.fd, p, len);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) bc_die("out-of-band channel: peer gone");
      p += r;
      len -= (size_t)r;
    }
    return;
  }
  char path[4096];
  snprintf(path, sizeof(path), "%s/m-%d-%llu", g_oob.dir, 1 - g_oob.rank, (unsigned long long)g_oob.rseq);
  g_oob.rseq++;
  for (;;) {
    FILE *f = fopen(path, "rb");
    if (f) {
      size_t got = fread(buf, 1, len, f);
      fclose(f);
      if (got != len) bc_die("out-of-band file %s: short", path);
      unlink(path);
      return;
    }
    if (bc_now_ns() > deadline) bc_die("timed out waiting for the peer (%s)", path);
    usleep(100);
  }
}

void oob_barrier(void) {
  uint32_t t = 0xba5e;
  oob_send(&t, sizeof(t));
  oob_recv(&t, sizeof(t));
  if (t != 0xba5e) bc_die("out-of-band channel out of step");
}
