"""Cordon before draining (KIP-1066): `execute` cordons each dir the plan drains (`plan --drain`) on brokers that
support cordons (moverd, Kafka 4.3+), before the first move, so no new partition and no other tool's move lands on
the disk while it is emptied. The cordon stays when the drain ends (lift it with `mover-log-dirs --uncordon` once the
disk is replaced). A broker without cordons is drained all the same, and the report says what it cannot promise.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from mover.admin import cordon
from mover.admin.client import ClientError
from mover.admin.common import AdminError
from mover.audit import plan_layout

if TYPE_CHECKING:
    from mover.audit.executor.clusters import ClusterRun


def drained_dirs(plan: Path) -> dict[str, dict[int, list[str]]]:
    """{cluster: {broker: [dirs]}} the plan drains, from its disks.parquet (empty for a plan without drains, or one
    written before plans recorded them)."""
    if not (plan / plan_layout.DISKS_FILE).exists():
        return {}
    keys = {c: plan_layout.DISKS[c] for c in ("cluster", "broker", "log_dir")}
    table = plan_layout.read_table(plan, plan_layout.DISKS_FILE, keys, {"drained": plan_layout.DISKS["drained"]})
    if "drained" not in table.column_names:
        return {}
    out: dict[str, dict[int, list[str]]] = {}
    for r in table.to_pylist():
        if r["drained"]:
            out.setdefault(r["cluster"], {}).setdefault(int(r["broker"]), []).append(r["log_dir"])
    return out


def cordon_drained(runs: list[ClusterRun], plan: Path, out: TextIO, *, dry_run: bool) -> None:
    """Cordon every drained dir of the plan on its broker (or, with dry_run, say what would be cordoned)."""
    drained = drained_dirs(plan)
    for run in runs:
        name = run.view.source.name
        for broker, dirs in sorted(drained.get(name, {}).items()):
            where = f"{','.join(dirs)} on broker {broker} of {name}"
            try:
                if not cordon.supports_cordons(run.client, broker):
                    print(f"not cordoned: {where} (the broker has no cordons, KIP-1066 needs Kafka 4.3+ or moverd): "
                          "new partitions may still land there while it drains", file=out)
                    continue
                if dry_run:
                    print(f"would cordon {where} before draining it", file=out)
                    continue
                after = cordon.set_cordon(run.client, broker, dirs, True)
            except (AdminError, ClientError) as e:
                print(f"not cordoned: {where}: {e}", file=out)
                continue
            still = [d for d in dirs if d not in cordon.cordoned(after)]
            if still:
                print(f"not cordoned yet: {','.join(still)} on broker {broker} of {name} (the broker has not "
                      "applied it)", file=out)
            else:
                print(f"cordoned {where} before draining it (KIP-1066)", file=out)
