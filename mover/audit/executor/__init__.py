"""mover-audit execute's library: a plan's moves carried out in steps on the step engine's loop
(mover/admin/reassign/step_engine.py `drive`). The command line is mover/audit/execute.py.

    moves.py      the plan's moves and their states (read through mover/audit/plan_layout.py)
    clusters.py   a cluster's connection, where its replicas are (DescribeLogDirs), the resume check (`classify`)
    schedule.py   pure: which log-dir moves may start now under the limits (`startable`), --dry-run's waves
    throttles.py  the log-dir throttle set for the run and each broker's own put back; the replication throttle's
    loop.py       the Executor: the lanes (log-dir moves, a StepEngine per cluster for moves between brokers) driven
                  by `drive`, limits file, interrupts, what is left running

The limits are mover/admin/limits.py's (one set for mover-reassign and mover-audit). Errors are AuditError /
AdminError; outcomes are returned, never exit codes.
"""
