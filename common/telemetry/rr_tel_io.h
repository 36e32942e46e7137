/* File and text helpers of the telemetry exporters: a growable text buffer
 * with JSON and Prometheus escaping, atomic replace, append with rollback,
 * one warning per failure episode, times and host names. Exporter thread
 * only (never the data path). */
#ifndef RERAIL_COMMON_TEL_IO_H
#define RERAIL_COMMON_TEL_IO_H
#include "rr_status.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct rr_tel_buf {
  char *p;
  size_t len, cap;
  int oom;          /* an append failed: the text is incomplete, do not write it */
} rr_tel_buf;

void rr_tel_buf_put(rr_tel_buf *b, const char *s, size_t n);
void rr_tel_buf_printf(rr_tel_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s as a JSON string literal, quotes included; control characters and bytes
 * >= 0x80 become \u00XX, so the output is ASCII and always valid JSON. */
void rr_tel_buf_json_str(rr_tel_buf *b, const char *s);
/* s escaped as a Prometheus label value (\\, \", \n), quotes not included. */
void rr_tel_buf_prom_label(rr_tel_buf *b, const char *s);
void rr_tel_buf_reset(rr_tel_buf *b);
void rr_tel_buf_free(rr_tel_buf *b);

/* One warning per failure episode of one kind of file: the first failure
 * warns, the next ones are silent, a success after failures says so (INFO)
 * and re-arms the warning. */
typedef struct rr_tel_io_state {
  int failing;
  uint64_t failures;  /* writes that failed, for tests and diagnostics */
} rr_tel_io_state;
void rr_tel_io_result(rr_tel_io_state *st, int err, const char *what, const char *path);

/* The file writers below return RR_OK, or RR_ERR_SYSTEM with the errno in
 * *err (0 on success) for rr_tel_io_result to name in its warning. */

/* Create dir (one level) when missing. */
rr_status rr_tel_ensure_dir(const char *dir, int *err);

/* Write data to dir/.name.tmp, then rename() it over dir/name, so a reader
 * sees the old file or the new one, never a part. */
rr_status rr_tel_write_atomic(const char *dir, const char *name, const void *data, size_t len, int *err);

/* Append to path through *fd (opened O_APPEND on first use; *fd < 0 means
 * closed). A short write is cut back off (ftruncate) so the file never holds
 * half a line; on error the fd is closed so the next call reopens. *size
 * tracks the file size. */
rr_status rr_tel_append(int *fd, const char *path, const void *data, size_t len, off_t *size, int *err);

uint64_t rr_tel_wall_ns(void);
/* "2024-05-01T12:00:00.123456789Z" */
void rr_tel_iso_time(uint64_t wall_ns, char *buf, size_t len);
/* gethostname() made safe for a file name (no '/', no spaces); "unknown" on error. */
void rr_tel_hostname(char *buf, size_t len);

#endif
