/* `rerail status --cost`: what the host does on each rail's queues per
 * message, from the processes' telemetry files (rerail-<host>-<pid>.prom):
 * rerail_rail_messages_total divides rerail_rail_doorbells_total,
 * rerail_rail_work_requests_total and rerail_rail_completions_total of the
 * same rail (docs/telemetry.md, "Queue work per message"). */
#ifndef RERAIL_TOOLS_STATUS_COST_H
#define RERAIL_TOOLS_STATUS_COST_H
#include <stdint.h>

enum { STATUS_Q_SEND = 0, STATUS_Q_RECV = 1 };

/* One rail of one connection direction of one process, as its .prom has it. */
typedef struct status_cost_row {
  long pid;              /* the file's pid label */
  char nic[32], peer[64], dir[8];
  int rail;
  uint64_t messages;
  uint64_t doorbells[2], work_requests[2], completions[2]; /* [STATUS_Q_SEND], [STATUS_Q_RECV] */
} status_cost_row;

/* Adds the rows of one .prom text to rows[0..*n) (merging samples of the
 * same rail; at most max rows). Lines that are not these families, or are
 * malformed, are skipped: the file is input like any other. Returns the
 * number of samples used. */
int status_cost_parse(const char *text, status_cost_row *rows, int *n, int max);

/* Every rerail-*.prom in dir into rows (at most max), in file order.
 * Returns the number of rows, -1 when dir cannot be read. */
int status_cost_read(const char *dir, status_cost_row *rows, int max);

/* v per message; a negative value when the rail finished no message. */
double status_cost_per_msg(uint64_t v, uint64_t messages);

#endif
