/* Anomaly snapshots: the raw samples around a throughput drop, one JSON file
 * each, at most RR_TEL_ANOMALY_KEEP per process (the oldest goes). */
#include "rr_tel_format.h"
#include "rr_tel_internal.h"

#include <errno.h>
#include <stdio.h>
#include <unistd.h>

void rr_tel_anomaly_json(rr_tel_buf *b, const rr_tel_config *cfg, const rr_tel_series *s,
                         const rr_tel_capture *c, uint64_t wall_off) {
  char when[48];
  rr_tel_iso_time(c->wall_ns, when, sizeof when);
  rr_tel_buf_printf(b, "{\"time\":\"%s\",\"time_ns\":%llu,\"mono_ns\":%llu,\"host\":", when,
                    (unsigned long long)c->wall_ns, (unsigned long long)c->mono_ns);
  rr_tel_buf_json_str(b, cfg->host);
  rr_tel_buf_printf(b, ",\"pid\":%d,\"seq\":%llu,\"nic\":", cfg->pid, (unsigned long long)c->seq);
  rr_tel_buf_json_str(b, s->nic);
  rr_tel_buf_put(b, ",\"peer\":", 8);
  rr_tel_buf_json_str(b, s->peer);
  rr_tel_buf_printf(b,
                    ",\"rail\":%d,\"direction\":\"%s\",\"window\":%u,\"fraction\":%.3f,"
                    "\"throughput_bytes_per_second\":%.0f,\"recent_average_bytes_per_second\":%.0f,"
                    "\"clock\":\"CLOCK_MONOTONIC\",\"wall_minus_mono_ns\":%llu,"
                    "\"samples_before\":%u,\"samples_after\":%u,\"samples\":[",
                    s->rail, rr_tel_dir_str(s->dir), s->win.w, cfg->anomaly_fraction, c->thr, c->avg,
                    (unsigned long long)wall_off, c->before, c->after);
  for (uint32_t i = 0; i < c->before + c->after; i++) {
    const rr_tel_sample *x = &c->s[i];
    rr_tel_buf_printf(b, "%s\n {\"post_ns\":%llu,\"done_ns\":%llu,\"bytes\":%u,\"after\":%s}", i ? "," : "",
                      (unsigned long long)x->post_ns, (unsigned long long)x->done_ns, x->bytes,
                      i >= c->before ? "true" : "false");
  }
  rr_tel_buf_put(b, "\n]}\n", 4);
}

rr_status rr_tel_anomaly_write(const rr_tel_config *cfg, uint64_t seq, const rr_tel_buf *b, rr_tel_io_state *io) {
  char name[128], path[2048];
  snprintf(name, sizeof name, RR_TEL_ANOMALY_PREFIX "%d-%llu.json", cfg->pid, (unsigned long long)seq);
  snprintf(path, sizeof path, "%s/%s", cfg->dir, name);
  int err = ENOMEM;
  rr_status st = b->oom ? RR_ERR_NOMEM : rr_tel_write_atomic(cfg->dir, name, b->p, b->len, &err);
  rr_tel_io_result(io, err, "anomaly snapshot", path);
  if (seq > RR_TEL_ANOMALY_KEEP) {
    /* Sequence numbers are dense, so the one to delete is known; one that
     * failed to be written is simply not there. */
    snprintf(path, sizeof path, "%s/" RR_TEL_ANOMALY_PREFIX "%d-%llu.json", cfg->dir, cfg->pid,
             (unsigned long long)(seq - RR_TEL_ANOMALY_KEEP));
    unlink(path);
  }
  return st;
}
