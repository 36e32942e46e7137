/* What `rerail top` and `rerail events` share: where the telemetry files
 * are, listing them, and human units. */
#ifndef RERAIL_TOOLS_TEL_FILES_H
#define RERAIL_TOOLS_TEL_FILES_H
#include <stddef.h>
#include <stdint.h>

int cmd_top(int argc, char **argv);
int cmd_events(int argc, char **argv);

/* --dir, else $RERAIL_TELEMETRY_DIR, else the node_exporter textfile directory. */
const char *tel_dir(const char *opt);

/* Names in dir starting with prefix and ending with suffix, sorted; *out is
 * a malloc'ed array of malloc'ed names. Returns the count, -1 when the
 * directory cannot be read. */
int tel_list(const char *dir, const char *prefix, const char *suffix, char ***out);
void tel_list_free(char **names, int n);

/* Whole file into a NUL-terminated malloc'ed buffer; NULL on error. */
char *tel_slurp(const char *path, size_t *len);

/* 1.23 GB/s, 456.7 MB/s ... (decimal units, as network rates are given) */
void tel_fmt_rate(double bytes_per_s, char *buf, size_t len);
/* 12.3 us, 4.56 ms, 1.20 s */
void tel_fmt_duration(double seconds, char *buf, size_t len);
/* 1.2 GB, 3.4 MB ... */
void tel_fmt_bytes(double bytes, char *buf, size_t len);

/* 1 when the process is alive (or on another host: unknown counts as alive). */
int tel_pid_alive(const char *host, long pid);

#endif
