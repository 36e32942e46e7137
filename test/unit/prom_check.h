/* Reading a telemetry .prom text in tests: a sample's value, and the
 * exposition format's structure, checked with cmocka's asserts. */
#ifndef RERAIL_TEST_PROM_CHECK_H
#define RERAIL_TEST_PROM_CHECK_H

/* The value of the sample whose line starts with prefix (name{labels...):
 * 0 and *v, or -1 when there is none. must_sample fails the test instead. */
int sample(const char *text, const char *prefix, double *v);
double must_sample(const char *text, const char *prefix);
/* Exposition-format structure: HELP then TYPE before a family's samples, each
 * family once and contiguous, known types, no timestamps, base-unit names. */
void check_structure(const char *text);

#endif
