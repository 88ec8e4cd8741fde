"""`mover-audit balance`'s library: collect -> plan -> execute in a loop that an operator leaves running. The
command line is mover/audit/balancer/command.py (balance.py beside this package is what "in band" means).

    loop.py     the Balancer: cycles, pauses, stopping (finish or cancel the moves in flight), recovery after a kill
    gates.py    when a cluster must wait (a broker down, a dir offline, someone else's reassignment or log-dir move,
                produce latency above the bound), one reason each
    canary.py   the balancer's own acks=all producer and its p99
    metrics.py  the balance_* Prometheus metrics
"""
