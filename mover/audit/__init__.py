"""mover-audit: collect the log dirs of a whole fleet, audit their balance, plan moves and carry them out in steps.

Runs on Spark (the `jbod-mover[audit]` extra); broker hosts that run only moverd never import this package."""
