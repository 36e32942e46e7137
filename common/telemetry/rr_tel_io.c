#include "rr_tel_io.h"
#include "rr_log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int buf_reserve(rr_tel_buf *b, size_t more) {
  if (b->oom) return -1;
  if (b->len + more + 1 <= b->cap) return 0;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap < b->len + more + 1) cap *= 2;
  char *p = realloc(b->p, cap);
  if (!p) {
    b->oom = 1;
    return -1;
  }
  b->p = p;
  b->cap = cap;
  return 0;
}

void rr_tel_buf_put(rr_tel_buf *b, const char *s, size_t n) {
  if (buf_reserve(b, n)) return;
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}

void rr_tel_buf_printf(rr_tel_buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char small[256];
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) {
    b->oom = 1;
    return;
  }
  if ((size_t)n < sizeof small) {
    rr_tel_buf_put(b, small, (size_t)n);
    return;
  }
  if (buf_reserve(b, (size_t)n)) return;
  va_start(ap, fmt);
  vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

void rr_tel_buf_json_str(rr_tel_buf *b, const char *s) {
  rr_tel_buf_put(b, "\"", 1);
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    if (*c == '"' || *c == '\\') {
      char e[2] = {'\\', (char)*c};
      rr_tel_buf_put(b, e, 2);
    } else if (*c < 0x20 || *c >= 0x7f) {
      rr_tel_buf_printf(b, "\\u%04x", *c);
    } else {
      rr_tel_buf_put(b, (const char *)c, 1);
    }
  }
  rr_tel_buf_put(b, "\"", 1);
}

void rr_tel_buf_prom_label(rr_tel_buf *b, const char *s) {
  for (const char *c = s; *c; c++) {
    if (*c == '\\') rr_tel_buf_put(b, "\\\\", 2);
    else if (*c == '"') rr_tel_buf_put(b, "\\\"", 2);
    else if (*c == '\n') rr_tel_buf_put(b, "\\n", 2);
    else rr_tel_buf_put(b, c, 1);
  }
}

void rr_tel_buf_reset(rr_tel_buf *b) {
  b->len = 0;
  b->oom = 0;
  if (b->p) b->p[0] = '\0';
}

void rr_tel_buf_free(rr_tel_buf *b) {
  free(b->p);
  memset(b, 0, sizeof *b);
}

void rr_tel_io_result(rr_tel_io_state *st, int err, const char *what, const char *path) {
  if (err == 0) {
    if (st->failing)
      RR_INFO(RR_SUB_NET, "telemetry: writing the %s (%s) works again", what, path);
    st->failing = 0;
    return;
  }
  st->failures++;
  if (!st->failing)
    RR_WARN("telemetry: cannot write the %s (%s): %s; recording goes on and the write is retried "
            "(no further warning until it works)", what, path, strerror(err));
  st->failing = 1;
}

/* An errno value (0: none) as a status, kept in *err for the log. */
static rr_status errno_status(int e, int *err) {
  if (err) *err = e;
  return e ? RR_ERR_SYSTEM : RR_OK;
}

static int ensure_dir(const char *dir) {
  struct stat sb;
  if (stat(dir, &sb) == 0) return S_ISDIR(sb.st_mode) ? 0 : ENOTDIR;
  if (mkdir(dir, 0755) == 0 || errno == EEXIST) return 0;
  return errno;
}

static int write_all(int fd, const char *p, size_t len, size_t *done) {
  *done = 0;
  while (*done < len) {
    ssize_t n = write(fd, p + *done, len - *done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return ENOSPC;
    *done += (size_t)n;
  }
  return 0;
}

rr_status rr_tel_ensure_dir(const char *dir, int *err) { return errno_status(ensure_dir(dir), err); }

static int write_atomic(const char *dir, const char *name, const void *data, size_t len) {
  char tmp[4096], path[4096];
  if ((size_t)snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, name) >= sizeof tmp ||
      (size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
    return ENAMETOOLONG;
  /* 0644: node_exporter runs as its own user and must read the file. */
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  size_t done;
  int err = write_all(fd, data, len, &done);
  if (close(fd) != 0 && !err) err = errno;
  if (!err && rename(tmp, path) != 0) err = errno;
  if (err) unlink(tmp);
  return err;
}

rr_status rr_tel_write_atomic(const char *dir, const char *name, const void *data, size_t len, int *err) {
  return errno_status(write_atomic(dir, name, data, len), err);
}

static int append(int *fd, const char *path, const void *data, size_t len, off_t *size) {
  if (*fd < 0) {
    *fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (*fd < 0) return errno;
    struct stat sb;
    *size = fstat(*fd, &sb) == 0 ? sb.st_size : 0;
  }
  size_t done;
  int err = write_all(*fd, data, len, &done);
  if (!err) {
    *size += (off_t)len;
    return 0;
  }
  /* Never leave half a line behind: a reader would parse garbage. */
  if (done && ftruncate(*fd, *size) != 0) {
    /* The tail stays; the reader skips a line it cannot parse. */
  }
  close(*fd);
  *fd = -1;
  return err;
}

rr_status rr_tel_append(int *fd, const char *path, const void *data, size_t len, off_t *size, int *err) {
  return errno_status(append(fd, path, data, len, size), err);
}

uint64_t rr_tel_wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void rr_tel_iso_time(uint64_t wall_ns, char *buf, size_t len) {
  time_t s = (time_t)(wall_ns / 1000000000ull);
  struct tm tm;
  gmtime_r(&s, &tm);
  char day[32];
  strftime(day, sizeof day, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(buf, len, "%s.%09uZ", day, (unsigned)(wall_ns % 1000000000ull));
}

void rr_tel_hostname(char *buf, size_t len) {
  if (gethostname(buf, len) != 0 || !buf[0]) snprintf(buf, len, "unknown");
  buf[len - 1] = '\0';
  for (char *c = buf; *c; c++)
    if (*c == '/' || *c == ' ' || *c == '\t' || *c == '\n' || *c == '"' || *c == '\\') *c = '_';
}
