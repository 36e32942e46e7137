/* Reading a telemetry .prom text in tests (prom_check.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "prom_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The value of the sample whose line starts with prefix (name{labels...). */
int sample(const char *text, const char *prefix, double *v) {
  for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
    if (!strncmp(p, prefix, strlen(prefix))) {
      const char *sp = strstr(p, "} ");
      if (!sp) return -1;
      *v = strtod(sp + 2, NULL);
      return 0;
    }
  return -1;
}

double must_sample(const char *text, const char *prefix) {
  double v = -1;
  if (sample(text, prefix, &v) != 0) {
    fprintf(stderr, "no sample starting with %s in:\n%s\n", prefix, text);
    fail();
  }
  return v;
}

/* Exposition-format structure: HELP then TYPE before a family's samples, each
 * family once and contiguous, known types, no timestamps, base-unit names. */
void check_structure(const char *text) {
  char seen[64][96];
  int nseen = 0;
  char cur[96] = "", type[16] = "";
  char *copy = strdup(text);
  for (char *line = strtok(copy, "\n"); line; line = strtok(NULL, "\n")) {
    char name[96];
    if (!strncmp(line, "# HELP ", 7)) {
      sscanf(line + 7, "%95s", name);
      for (int i = 0; i < nseen; i++) assert_string_not_equal(seen[i], name); /* once */
      snprintf(seen[nseen++], sizeof seen[0], "%s", name);
      snprintf(cur, sizeof cur, "%s", name);
      type[0] = '\0';
      continue;
    }
    if (!strncmp(line, "# TYPE ", 7)) {
      char t[16];
      assert_int_equal(sscanf(line + 7, "%95s %15s", name, t), 2);
      assert_string_equal(name, cur);
      assert_true(!strcmp(t, "gauge") || !strcmp(t, "counter") || !strcmp(t, "summary"));
      snprintf(type, sizeof type, "%s", t);
      continue;
    }
    assert_true(type[0]); /* a sample inside a declared family */
    size_t n = strcspn(line, "{ ");
    snprintf(name, sizeof name, "%.*s", (int)n, line);
    size_t cl = strlen(cur);
    int ok = !strcmp(name, cur) ||
             (!strcmp(type, "summary") && !strncmp(name, cur, cl) &&
              (!strcmp(name + cl, "_sum") || !strcmp(name + cl, "_count")));
    if (!ok) fprintf(stderr, "sample %s outside its family (in %s)\n", name, cur);
    assert_true(ok);
    assert_true(!strncmp(name, "rerail_", 7));
    if (!strcmp(type, "counter")) assert_true(strstr(cur, "_total") != NULL);
    /* name{labels} value: exactly two fields after the labels (no timestamp) */
    const char *sp = strrchr(line, '}');
    assert_non_null(sp);
    double v;
    char extra[8];
    assert_int_equal(sscanf(sp + 1, " %lf %7s", &v, extra), 1);
  }
  free(copy);
}
