"""Every metric name ajet-runner exports. The dashboard, the alert rules and the tests check against this."""

from __future__ import annotations

from ajet_runner.statemachine.metric_vocabulary import HEADLINE, STAGE_BEST_GAUGE

# Computed from Redis by the API at scrape time (one target sees the whole cluster).
API_METRICS = (
    "ajet_runner_experiments",  # {state}
    "ajet_runner_experiment_info",  # {experiment, purpose, node} = 1: join purpose from here
    "ajet_runner_experiment_elapsed_seconds",  # {experiment, node}
    "ajet_runner_experiment_max_seconds",  # {experiment, node}
    *(h.gauge for h in HEADLINE),  # {experiment, node} (+ {k} for a family): the latest value of each
    "ajet_runner_experiment_val_step",  # {experiment, node}
    "ajet_runner_experiment_state",  # {experiment, node, state} = 1
    "ajet_runner_experiment_attempt",  # {experiment, node}
    "ajet_runner_experiment_nodes",  # {experiment, node}: nnodes (node = the head of a multi-node run)
    "ajet_runner_transitions_total",  # {from_state, to_state}
    "ajet_runner_repairs_total",  # {signature, result}
    "ajet_runner_advised_repairs_total",  # {model, result}
    "ajet_runner_outcomes_total",  # {outcome}
    "ajet_runner_result_write_failures_total",  # {errno}: result files / finish.flag not written
    "ajet_runner_run_duration_seconds",  # histogram {outcome}: _bucket/_sum/_count
    "ajet_runner_queue_jobs",  # {queue}
    "ajet_runner_queue_oldest_job_age_seconds",  # {queue}
    "ajet_runner_node_up",  # {node}
    "ajet_runner_node_heartbeat_age_seconds",  # {node}
    "ajet_runner_node_gpus",  # {node, state}  state = total|busy|free
    "ajet_runner_node_executor_info",  # {node, executor}: 1 for the executor its runs go to (local, ssh, slurm)
    "ajet_runner_queued_for_absent_node",  # {node}: queued work for a node gone > node_absent_report_seconds
    "ajet_runner_queued_experiments",  # {node}: queued per target node ("" = any); no per-experiment series
    "ajet_runner_queued_oldest_age_seconds",  # {node}: how long the oldest of them has waited
    "ajet_runner_stage_experiments",  # {stage, state}
    "ajet_runner_stage_outcomes",  # {stage, outcome}
    STAGE_BEST_GAUGE,  # {stage}: the best value of the headline metric any of its experiments reached
    "ajet_runner_http_request_duration_seconds",  # histogram {method, route, status}
    # The API process itself (prometheus_client's ProcessCollector): the serving process, not the cluster.
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
    "process_virtual_memory_bytes",
    "process_start_time_seconds",
    "process_open_fds",
    "process_max_fds",
)

# Exported by each worker on its own port.
WORKER_METRICS = (
    "ajet_runner_worker_watch_loop_seconds",  # histogram: one observation pass
    "ajet_runner_worker_log_bytes_total",  # {experiment}
    "ajet_runner_worker_last_output_age_seconds",  # {experiment}: the stall signal
    "ajet_runner_worker_heartbeat_timestamp_seconds",  # {node}
    "ajet_runner_worker_running_experiments",  # {node}
    # The worker's whole process tree (supervisor and its watcher), hence not the standard process_* names.
    "ajet_runner_worker_tree_cpu_seconds_total",
    "ajet_runner_worker_tree_resident_memory_bytes",
)

EXPORTED_METRICS = API_METRICS + WORKER_METRICS
