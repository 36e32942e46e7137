/* `rerail status --cost` (tools/status_cost.c): the per-message ratios read
 * back from a known .prom text, and from the exporter's own file at the end
 * of a process that keeps it (RERAIL_TELEMETRY_KEEP), which is how
 * bench/verbs_cost_lab.sh reads a finished run's totals. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "rr_telemetry.h"
#include "status_cost.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAXR 16

static const status_cost_row *find(const status_cost_row *rows, int n, long pid, const char *nic, int rail,
                                   const char *dir) {
  for (int i = 0; i < n; i++)
    if (rows[i].pid == pid && rows[i].rail == rail && !strcmp(rows[i].nic, nic) && !strcmp(rows[i].dir, dir))
      return &rows[i];
  return NULL;
}

/* A sender's rail (tx) and a receiver's (rx) of one process, another
 * process's rail, and lines the parser must not take. */
static const char known_prom[] =
    "# HELP rerail_rail_messages_total Messages finished on the rail.\n"
    "# TYPE rerail_rail_messages_total counter\n"
    "rerail_rail_messages_total{host=\"h\",pid=\"7\",nic=\"vethA0\",peer=\"10.55.0.2\",rail=\"0\",direction=\"tx\"} 40\n"
    "rerail_rail_messages_total{host=\"h\",pid=\"7\",nic=\"vethA0\",peer=\"10.55.0.2\",rail=\"0\",direction=\"rx\"} 8\n"
    "rerail_rail_messages_total{host=\"h\",pid=\"7\",nic=\"vethA1\",peer=\"10.55.0.2\",rail=\"1\",direction=\"tx\"} 0\n"
    "rerail_rail_doorbells_total{host=\"h\",pid=\"7\",nic=\"vethA0\",peer=\"10.55.0.2\",rail=\"0\",direction=\"tx\",queue=\"send\"} 160\n"
    "rerail_rail_doorbells_total{host=\"h\",pid=\"7\",nic=\"vethA0\",peer=\"10.55.0.2\",rail=\"0\",direction=\"tx\",queue=\"recv\"} 20\n"
    "rerail_rail_work_requests_total{host=\"h\",pid=\"7\",nic=\"vethA0\",peer=\"10.55.0.2\",rail=\"0\",direction=\"tx\",queue=\"send\"} 170\n"
    "rerail_rail_work_requests_total{host=\"h\",pid=\"7\",nic=\"vethA0\",peer=\"10.55.0.2\",rail=\"0\",direction=\"tx\",queue=\"recv\"} 20\n"
    "rerail_rail_completions_total{host=\"h\",pid=\"7\",nic=\"vethA0\",peer=\"10.55.0.2\",rail=\"0\",direction=\"tx\",queue=\"send\"} 80\n"
    "rerail_rail_completions_total{host=\"h\",pid=\"7\",nic=\"vethA0\",peer=\"10.55.0.2\",rail=\"0\",direction=\"tx\",queue=\"recv\"} 20\n"
    "rerail_rail_doorbells_total{host=\"h\",pid=\"7\",nic=\"vethA0\",peer=\"10.55.0.2\",rail=\"0\",direction=\"rx\",queue=\"recv\"} 36\n"
    "rerail_rail_completions_total{host=\"h\",pid=\"7\",nic=\"vethA0\",peer=\"10.55.0.2\",rail=\"0\",direction=\"rx\",queue=\"recv\"} 32\n"
    "rerail_rail_doorbells_total{host=\"h\",pid=\"7\",nic=\"vethA1\",peer=\"10.55.0.2\",rail=\"1\",direction=\"tx\",queue=\"send\"} 3\n"
    /* not taken: another family, a queue it does not know, no value, a
     * negative value, a value too large, a pid that is not a number */
    "rerail_rail_requests_total{host=\"h\",pid=\"7\",nic=\"vethA0\",peer=\"10.55.0.2\",rail=\"0\",direction=\"tx\"} 999\n"
    "rerail_rail_doorbells_total{host=\"h\",pid=\"7\",nic=\"vethA0\",peer=\"10.55.0.2\",rail=\"0\",direction=\"tx\",queue=\"flush\"} 999\n"
    "rerail_rail_doorbells_total{host=\"h\",pid=\"7\",nic=\"vethA0\",peer=\"10.55.0.2\",rail=\"0\",direction=\"rx\",queue=\"send\"}\n"
    "rerail_rail_completions_total{host=\"h\",pid=\"7\",nic=\"vethA0\",peer=\"10.55.0.2\",rail=\"0\",direction=\"rx\",queue=\"send\"} -4\n"
    "rerail_rail_work_requests_total{host=\"h\",pid=\"7\",nic=\"vethA0\",peer=\"10.55.0.2\",rail=\"0\",direction=\"rx\",queue=\"recv\"} 99999999999999999999999\n"
    "rerail_rail_messages_total{host=\"h\",pid=\"x7\",nic=\"vethA0\",peer=\"10.55.0.2\",rail=\"0\",direction=\"tx\"} 5\n"
    /* another process (no trailing newline) */
    "rerail_rail_messages_total{host=\"h\",pid=\"9\",nic=\"vethB0\",peer=\"10.55.0.1\",rail=\"0\",direction=\"rx\"} 3";

static void known_text(void **state) {
  (void)state;
  status_cost_row rows[MAXR];
  int n = 0;
  assert_int_equal(status_cost_parse(known_prom, rows, &n, MAXR), 13);
  assert_int_equal(n, 4);
  const status_cost_row *tx = find(rows, n, 7, "vethA0", 0, "tx");
  assert_non_null(tx);
  assert_string_equal(tx->peer, "10.55.0.2");
  assert_int_equal(tx->messages, 40);
  assert_int_equal(tx->doorbells[STATUS_Q_SEND], 160);
  assert_int_equal(tx->work_requests[STATUS_Q_SEND], 170);
  assert_int_equal(tx->completions[STATUS_Q_RECV], 20);
  assert_true(status_cost_per_msg(tx->doorbells[STATUS_Q_SEND], tx->messages) == 4.0);
  assert_true(status_cost_per_msg(tx->work_requests[STATUS_Q_SEND], tx->messages) == 4.25);
  assert_true(status_cost_per_msg(tx->completions[STATUS_Q_SEND], tx->messages) == 2.0);
  assert_true(status_cost_per_msg(tx->doorbells[STATUS_Q_RECV], tx->messages) == 0.5);
  const status_cost_row *rx = find(rows, n, 7, "vethA0", 0, "rx");
  assert_non_null(rx);
  assert_true(status_cost_per_msg(rx->doorbells[STATUS_Q_RECV], rx->messages) == 4.5);
  assert_true(status_cost_per_msg(rx->completions[STATUS_Q_RECV], rx->messages) == 4.0);
  assert_int_equal(rx->completions[STATUS_Q_SEND], 0);     /* -4 was not taken */
  assert_int_equal(rx->work_requests[STATUS_Q_RECV], 0);   /* nor the overflow */
  /* No message yet: no ratio, whatever the queues did. */
  const status_cost_row *idle = find(rows, n, 7, "vethA1", 1, "tx");
  assert_non_null(idle);
  assert_int_equal(idle->doorbells[STATUS_Q_SEND], 3);
  assert_true(status_cost_per_msg(idle->doorbells[STATUS_Q_SEND], idle->messages) < 0);
  const status_cost_row *other = find(rows, n, 9, "vethB0", 0, "rx");
  assert_non_null(other);
  assert_int_equal(other->messages, 3);
  /* A full table takes no more rows (and writes none past it). */
  n = 0;
  status_cost_parse(known_prom, rows, &n, 1);
  assert_int_equal(n, 1);
}

static char g_dir[128];

static int setup(void **state) {
  (void)state;
  snprintf(g_dir, sizeof g_dir, "/tmp/rerail-stcost-XXXXXX");
  if (!mkdtemp(g_dir)) return -1;
  setenv("RERAIL_TELEMETRY_DIR", g_dir, 1);
  setenv("RERAIL_TELEMETRY_INTERVAL", "3600000", 1); /* files only when the test says */
  return 0;
}

static int teardown(void **state) {
  (void)state;
  rr_tel_reset_for_tests();
  unsetenv("RERAIL_TELEMETRY_DIR");
  unsetenv("RERAIL_TELEMETRY_INTERVAL");
  unsetenv("RERAIL_TELEMETRY_KEEP");
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
  return system(cmd) == 0 ? 0 : -1;
}

/* What one process's rails did, as the engine and a verbs endpoint report
 * it, then the process ends. */
static void one_process(void) {
  rr_tel_rail *tx = rr_tel_rail_open(0, "vethA0", "10.55.0.2", 0, RR_TEL_TX);
  rr_tel_rail *rx = rr_tel_rail_open(0, "vethA0", "10.55.0.2", 0, RR_TEL_RX);
  assert_non_null(tx);
  assert_non_null(rx);
  rr_tel_cost ct = {{0}}, pt = {{0}}, cr = {{0}}, pr = {{0}};
  ct.n[RR_TEL_COST_DOORBELLS_SEND] = 12, ct.n[RR_TEL_COST_WRS_SEND] = 24, ct.n[RR_TEL_COST_CQES_SEND] = 6;
  ct.n[RR_TEL_COST_CQES_RECV] = 3;
  rr_tel_cost_publish(tx, &ct, &pt);
  for (int i = 0; i < 6; i++) rr_tel_message(tx);
  cr.n[RR_TEL_COST_DOORBELLS_RECV] = 9, cr.n[RR_TEL_COST_CQES_RECV] = 9;
  rr_tel_cost_publish(rx, &cr, &pr);
  for (int i = 0; i < 3; i++) rr_tel_message(rx);
  rr_tel_rail_figures f;
  assert_int_equal(rr_tel_flush(), 0);
  assert_int_equal(rr_tel_rail_figures_get("vethA0", "10.55.0.2", 0, RR_TEL_TX, &f), 0);
  assert_int_equal(f.messages, 6);
  rr_tel_rail_close(tx);
  rr_tel_rail_close(rx);
  rr_tel_shutdown(); /* what unloading the plugin does */
}

static void kept_file(void **state) {
  (void)state;
  setenv("RERAIL_TELEMETRY_KEEP", "1", 1);
  one_process();
  status_cost_row rows[MAXR];
  int n = status_cost_read(g_dir, rows, MAXR);
  assert_int_equal(n, 2);
  const status_cost_row *tx = find(rows, n, (long)getpid(), "vethA0", 0, "tx");
  const status_cost_row *rx = find(rows, n, (long)getpid(), "vethA0", 0, "rx");
  assert_non_null(tx);
  assert_non_null(rx);
  assert_int_equal(tx->messages, 6);
  assert_true(status_cost_per_msg(tx->doorbells[STATUS_Q_SEND], tx->messages) == 2.0);
  assert_true(status_cost_per_msg(tx->work_requests[STATUS_Q_SEND], tx->messages) == 4.0);
  assert_true(status_cost_per_msg(tx->completions[STATUS_Q_SEND], tx->messages) == 1.0);
  assert_true(status_cost_per_msg(tx->completions[STATUS_Q_RECV], tx->messages) == 0.5);
  assert_int_equal(rx->messages, 3);
  assert_true(status_cost_per_msg(rx->doorbells[STATUS_Q_RECV], rx->messages) == 3.0);
  assert_true(status_cost_per_msg(rx->completions[STATUS_Q_RECV], rx->messages) == 3.0);
}

static void file_removed_by_default(void **state) {
  (void)state;
  one_process();
  status_cost_row rows[MAXR];
  assert_int_equal(status_cost_read(g_dir, rows, MAXR), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(known_text),
      cmocka_unit_test_setup_teardown(kept_file, setup, teardown),
      cmocka_unit_test_setup_teardown(file_removed_by_default, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
