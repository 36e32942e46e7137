/* Names of the telemetry files and of what is inside them: the one place the
 * exporter (common/telemetry/rr_tel_*.c) and the readers (`rerail top`, `rerail events`)
 * agree on. The full description of every metric and field is in
 * docs/telemetry.md.
 *
 * Files in RERAIL_TELEMETRY_DIR, per process:
 *   rerail-<host>-<pid>.prom          Prometheus text (node_exporter textfile
 *                                     collector), replaced atomically every
 *                                     RERAIL_TELEMETRY_INTERVAL ms; removed when
 *                                     the process unloads the plugin
 *   rerail-events-<host>-<pid>.jsonl  one JSON object per health event;
 *                                     rotated to .jsonl.1 at the size cap
 *   rerail-anomaly-<pid>-<seq>.json   raw samples around a throughput drop
 *   rerail-trace-<host>-<pid>.csv     every sample and its window throughput
 *                                     (only with RERAIL_TELEMETRY_TRACE=1) */
#ifndef RERAIL_COMMON_TEL_FORMAT_H
#define RERAIL_COMMON_TEL_FORMAT_H

#define RR_TEL_PROM_PREFIX "rerail-"
#define RR_TEL_PROM_SUFFIX ".prom"
#define RR_TEL_EVENTS_PREFIX "rerail-events-"
#define RR_TEL_EVENTS_SUFFIX ".jsonl"
#define RR_TEL_ANOMALY_PREFIX "rerail-anomaly-"
#define RR_TEL_TRACE_PREFIX "rerail-trace-"

/* Where `rerail top`/`rerail events` look without --dir and without
 * RERAIL_TELEMETRY_DIR: Debian's node_exporter textfile directory. */
#define RR_TEL_DEFAULT_DIR "/var/lib/prometheus/node-exporter"

/* Metric families (base units, _total for counters). Labels of the per-rail
 * families: host, pid, nic, peer, rail, direction ("tx" or "rx"). */
#define RR_TEL_M_THROUGHPUT "rerail_rail_throughput_bytes_per_second"
#define RR_TEL_M_BYTES "rerail_rail_bytes_total"
#define RR_TEL_M_REQUESTS "rerail_rail_requests_total"
#define RR_TEL_M_LATENCY "rerail_rail_latency_seconds"
/* The host's work on the rail's queues (rr_tel_cost), label queue="send"|"recv". */
#define RR_TEL_M_MESSAGES "rerail_rail_messages_total"
#define RR_TEL_M_DOORBELLS "rerail_rail_doorbells_total"
#define RR_TEL_M_WORK_REQUESTS "rerail_rail_work_requests_total"
#define RR_TEL_M_COMPLETIONS "rerail_rail_completions_total"
#define RR_TEL_M_ANOMALIES "rerail_rail_anomalies_total"
#define RR_TEL_M_DROPPED "rerail_telemetry_dropped_samples_total"
/* Keyed by what health events name: host, pid, nic, peer. */
#define RR_TEL_M_RAIL_STATE "rerail_rail_state"
#define RR_TEL_M_FAILOVERS "rerail_failovers_total"
#define RR_TEL_M_FAILBACKS "rerail_failbacks_total"
#define RR_TEL_M_FAULTS "rerail_rail_faults_total"
#define RR_TEL_M_DEGRADED "rerail_rail_degraded"
#define RR_TEL_M_DEMOTIONS "rerail_rail_demotions_total"
/* host, pid, nic */
#define RR_TEL_M_NIC_STATE "rerail_nic_state"
/* host, pid, nic, transport, rdma_device, rdma_port: always 1 */
#define RR_TEL_M_NIC_INFO "rerail_nic_info"
/* host, pid, peer */
#define RR_TEL_M_ERRORS "rerail_connection_errors_total"
/* host, pid, kind */
#define RR_TEL_M_EVENTS "rerail_events_total"
/* host, pid */
#define RR_TEL_M_DROPPED_EVENTS "rerail_telemetry_dropped_events_total"
#define RR_TEL_M_WINDOW "rerail_telemetry_window_requests"
#define RR_TEL_M_LAST_EXPORT "rerail_telemetry_last_export_timestamp_seconds"

#endif
