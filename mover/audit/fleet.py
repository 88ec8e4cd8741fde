"""Which brokers make up the fleet: a fleet file naming many clusters, or one cluster given on the command line.

    [clusters.east]                      # fleet.toml
    bootstrap = "k1:9092,k2:9092"        # Metadata lists the brokers
    capacity = "east-capacity.json"      # optional: Cruise Control's capacityJBOD.json, relative to this file

    [clusters.west]
    zookeeper = "zk1:2181,zk2:2181/kafka"  # /brokers/ids/* as Kafka registers its brokers
    command_config = "west-client.properties"  # optional: Kafka's client security keys (TLS, SASL), relative too

`--bootstrap-server` and `--zookeeper HOST:PORT/chroot` name one cluster (called `--cluster NAME`, default
"default"), with `--command-config FILE` for its security keys (with `--fleet`: for the clusters that name no
`command_config`); `--cluster NAME` with `--fleet` picks clusters from the file. Every mistake in the file is one line
(FleetError, exit 2). Broker discovery never needs Spark: it runs on the driver, the per-broker queries do not.
"""

from __future__ import annotations

import argparse
import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from mover.admin.client import DEFAULT_TIMEOUT_S, Client, ClientError, parse_host_port
from mover.admin.common import AdminError
from mover.audit.errors import AuditInputError
from mover.cli.common import load_command_config
from mover.config.security import PLAINTEXT
from mover.security.client_config import ClientSecurity
from mover.zk import bounded_json

DEFAULT_CLUSTER = "default"
# Cruise Control's capacity files give DISK in MB of 2^20 bytes (its metrics divide bytes by 1024 * 1024).
CAPACITY_UNIT_BYTES = 1 << 20
DEFAULT_BROKER = "-1"
ZK_TIMEOUT_S = 10.0
PROG = "mover-audit"
FLEET_KEYS = ("bootstrap", "zookeeper", "capacity", "command_config")


class FleetError(AuditInputError):
    """A fleet file, capacity file or source option that cannot be used (one line; the command line exits 2)."""


@dataclass(frozen=True)
class Capacity:
    """Disk sizes in bytes from a capacityJBOD.json: per broker id, with the `-1` entry as every other broker's."""

    per_broker: dict[int, dict[str, int]] = field(default_factory=dict)
    default: dict[str, int] | None = None

    def for_broker(self, broker: int) -> dict[str, int]:
        return self.per_broker.get(broker, self.default or {})


@dataclass(frozen=True)
class ClusterSource:
    name: str
    bootstrap: str | None = None
    zookeeper: str | None = None
    capacity: Capacity | None = None
    security: ClientSecurity | None = None  # --command-config / command_config: TLS and SASL to its brokers


@dataclass(frozen=True)
class BrokerEndpoint:
    """One broker to query: where it listens, and the disk sizes the capacity file gives it (if any)."""

    cluster: str
    broker: int
    host: str
    port: int
    capacity: dict[str, int] = field(default_factory=dict)
    # Travels with the broker into the Spark task that queries it (a frozen value; no SSLContext until used).
    security: ClientSecurity | None = None


@dataclass
class ClusterView:
    """What discovery found: the brokers, and each partition's replicas in Metadata's order."""

    source: ClusterSource
    brokers: list[BrokerEndpoint]
    partitions: list[tuple[str, int, list[int]]]
    error: str | None = None  # discovery failed (no broker answered, ZooKeeper down): the cluster is recorded so
    # Broker ids that partitions list as replicas but that no broker list names: down, or fenced by the controller.
    # A real Kafka drops a broker from Metadata's brokers ~10 s after it dies (its session times out) while its
    # partitions keep naming it, so without these a dead broker would vanish from a snapshot instead of being a
    # failed row of `brokers`.
    missing: list[int] = field(default_factory=list)


# ------------------------------------------------------------------------------------------------ arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("brokers (one of --fleet, --bootstrap-server, --zookeeper)")
    group.add_argument("--fleet", type=Path, metavar="FLEET.toml", help="clusters to visit ([clusters.NAME])")
    group.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]", help="one cluster, found through Metadata")
    group.add_argument("--zookeeper", metavar="HOST:PORT[/chroot]", help="one cluster, found through /brokers/ids")
    group.add_argument("--cluster", action="append", default=[], metavar="NAME",
                       help="with --fleet: only these clusters (repeatable); else: the cluster's name "
                            f"(default {DEFAULT_CLUSTER!r})")
    group.add_argument("--command-config", type=Path, metavar="FILE",
                       help="Kafka client security keys (security.protocol, sasl.*, ssl.*) for the brokers; with "
                            "--fleet, for the clusters that name no command_config")
    group.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                       help=f"per request to one broker (default {DEFAULT_TIMEOUT_S:g})")


def add_capacity_argument(parser: argparse.ArgumentParser) -> None:
    """--capacity: only for the subcommands that read disk sizes (collect); execute moves what the plan says."""
    parser.add_argument("--capacity", type=Path, metavar="capacityJBOD.json",
                        help="disk sizes (Cruise Control's format) for brokers whose DescribeLogDirs has none")


def sources_from_args(args: argparse.Namespace, capacity: Path | None = None) -> list[ClusterSource]:
    """The clusters the source options name; `capacity` (--capacity) is every cluster's without its own file."""
    given = [o for o, v in (("--fleet", args.fleet), ("--bootstrap-server", args.bootstrap_server),
                            ("--zookeeper", args.zookeeper)) if v]
    if len(given) != 1:
        raise FleetError("give exactly one of --fleet, --bootstrap-server, --zookeeper"
                         + (f" (got {', '.join(given)})" if given else ""))
    default_capacity = load_capacity(capacity) if capacity else None
    security = load_command_config(args.command_config, PROG) if args.command_config else None
    if args.fleet:
        sources = load_fleet(args.fleet)
        if args.cluster:
            known = {s.name for s in sources}
            unknown = [c for c in args.cluster if c not in known]
            if unknown:
                raise FleetError(f"cluster {', '.join(unknown)} is not in {args.fleet} "
                                 f"(clusters: {', '.join(sorted(known))})")
            sources = [s for s in sources if s.name in args.cluster]
        if default_capacity is not None:
            sources = [s if s.capacity else dataclasses.replace(s, capacity=default_capacity) for s in sources]
        if security is not None:
            # Like --capacity: the default for the clusters whose table names no command_config.
            sources = [s if s.security else dataclasses.replace(s, security=security) for s in sources]
        return sources
    if len(args.cluster) > 1:
        raise FleetError("--cluster names the one cluster of --bootstrap-server / --zookeeper: give it once")
    name = args.cluster[0] if args.cluster else DEFAULT_CLUSTER
    if args.bootstrap_server:
        _check_bootstrap(args.bootstrap_server, "--bootstrap-server")
    else:
        _check_zookeeper(args.zookeeper, "--zookeeper")
    return [ClusterSource(name, args.bootstrap_server, args.zookeeper, default_capacity, security)]


# ------------------------------------------------------------------------------------------------ files


def load_fleet(path: Path) -> list[ClusterSource]:
    try:
        doc = tomllib.loads(path.read_text())
    except OSError as e:
        raise FleetError(f"cannot read fleet file {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise FleetError(f"fleet file {path} is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as e:
        raise FleetError(f"fleet file {path} is not valid TOML: {e}") from None
    except RecursionError:
        # tomllib recurses once per nested array or inline table and has no bound of its own.
        raise FleetError(f"fleet file {path} is not valid TOML: nested too deeply") from None
    extra = set(doc) - {"clusters"}
    if extra:
        raise FleetError(f"fleet file {path}: unknown top-level key {sorted(extra)[0]!r} (expected [clusters.NAME])")
    clusters = doc.get("clusters")
    if not isinstance(clusters, dict) or not clusters:
        raise FleetError(f"fleet file {path} names no cluster (expected [clusters.NAME] tables)")
    sources = []
    for name, entry in clusters.items():
        where = f"fleet file {path}, cluster {name!r}"
        if not isinstance(entry, dict):
            raise FleetError(f"{where}: expected a table with bootstrap or zookeeper")
        unknown = set(entry) - set(FLEET_KEYS)
        if unknown:
            raise FleetError(f"{where}: unknown key {sorted(unknown)[0]!r} (allowed: {', '.join(FLEET_KEYS)})")
        bootstrap, zookeeper = entry.get("bootstrap"), entry.get("zookeeper")
        if (bootstrap is None) == (zookeeper is None):
            raise FleetError(f"{where}: give exactly one of bootstrap, zookeeper")
        if isinstance(bootstrap, list) and all(isinstance(b, str) for b in bootstrap):
            bootstrap = ",".join(bootstrap)
        if bootstrap is not None:
            if not isinstance(bootstrap, str):
                raise FleetError(f"{where}: bootstrap must be \"HOST:PORT,...\" or a list of them")
            _check_bootstrap(bootstrap, where + ": bootstrap")
        if zookeeper is not None:
            if not isinstance(zookeeper, str):
                raise FleetError(f"{where}: zookeeper must be \"HOST:PORT[,...][/chroot]\"")
            _check_zookeeper(zookeeper, where + ": zookeeper")
        capacity = None
        if "capacity" in entry:
            if not isinstance(entry["capacity"], str):
                raise FleetError(f"{where}: capacity must be the path of a capacityJBOD.json")
            capacity = load_capacity(path.parent / entry["capacity"])
        security = None
        if "command_config" in entry:
            if not isinstance(entry["command_config"], str):
                raise FleetError(f"{where}: command_config must be the path of a client properties file")
            try:
                security = load_command_config(path.parent / entry["command_config"], PROG)
            except AdminError as e:
                raise FleetError(f"{where}: {e}") from None
        sources.append(ClusterSource(name, bootstrap, zookeeper, capacity, security))
    return sources


def load_capacity(path: Path) -> Capacity:
    """Cruise Control's capacityJBOD.json: {"brokerCapacities": [{"brokerId": "-1" | "N", "capacity": {"DISK":
    {"/path": "MB", ...}, ...}}]}. Only DISK is read; a DISK given as one number (not JBOD) names no dir, so it
    is refused rather than guessed onto dirs."""
    try:
        doc = bounded_json.loads(path.read_bytes())
    except OSError as e:
        raise FleetError(f"cannot read capacity file {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise FleetError(f"capacity file {path} is not JSON: {bounded_json.reason(e)}") from None
    entries = doc.get("brokerCapacities") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise FleetError(f"capacity file {path}: expected {{\"brokerCapacities\": [...]}} (Cruise Control's format)")
    per_broker: dict[int, dict[str, int]] = {}
    default = None
    for i, entry in enumerate(entries):
        where = f"capacity file {path}, entry {i}"
        if not isinstance(entry, dict) or not isinstance(entry.get("capacity"), dict):
            raise FleetError(f"{where}: expected {{\"brokerId\": ..., \"capacity\": {{\"DISK\": ...}}}}")
        broker_id = str(entry.get("brokerId", ""))
        if not broker_id.lstrip("-").isdigit():
            raise FleetError(f"{where}: brokerId {entry.get('brokerId')!r} is not a broker id or \"-1\"")
        disk = entry["capacity"].get("DISK")
        if not isinstance(disk, dict):
            raise FleetError(f"{where}: DISK must map each log dir to its size in MB (capacityJBOD.json)")
        sizes = {}
        for log_dir, mb in disk.items():
            try:
                value = float(mb)
            except (TypeError, ValueError):
                raise FleetError(f"{where}: size of {log_dir} is {mb!r}, not a number of MB") from None
            if not value > 0:
                raise FleetError(f"{where}: size of {log_dir} must be positive, got {mb!r}")
            sizes[log_dir] = int(value * CAPACITY_UNIT_BYTES)
        if broker_id == DEFAULT_BROKER:
            default = sizes
        else:
            per_broker[int(broker_id)] = sizes
    return Capacity(per_broker, default)


def _check_bootstrap(text: str, where: str) -> None:
    try:
        if not [parse_host_port(a) for a in text.split(",") if a.strip()]:
            raise FleetError(f"{where}: no broker address given")
    except ClientError as e:
        raise FleetError(f"{where}: {e}") from None


def _check_zookeeper(text: str, where: str) -> None:
    hosts, _, chroot = text.partition("/")
    try:
        if not [parse_host_port(a) for a in hosts.split(",") if a.strip()]:
            raise FleetError(f"{where}: no ZooKeeper address given")
    except ClientError as e:
        raise FleetError(f"{where}: {str(e).replace('broker address', 'ZooKeeper address')}") from None
    if chroot and any(not part for part in chroot.rstrip("/").split("/")):
        raise FleetError(f"{where}: chroot /{chroot} has an empty path element")


# ------------------------------------------------------------------------------------------------ discovery


def discover(source: ClusterSource, timeout: float = DEFAULT_TIMEOUT_S) -> ClusterView:
    """The brokers of one cluster and its partitions. A cluster nobody answers for is returned with `error` set, so
    the rest of the fleet goes on."""
    capacity = source.capacity or Capacity()
    try:
        assigned: dict[tuple[str, int], list[int]] = {}
        if source.zookeeper:
            protocol = source.security.protocol if source.security else PLAINTEXT
            registered, assigned = zookeeper_cluster(source.zookeeper, timeout, protocol)
            bootstrap = ",".join(f"{h}:{p}" for h, p in registered.values())
        else:
            registered = {}
            bootstrap = source.bootstrap or ""
        listed: dict[tuple[str, int], list[int]] = {}
        try:
            with Client(bootstrap, timeout=timeout, security=source.security) as client:
                reply = client.metadata(None)
                # ZooKeeper knows brokers that Metadata may not (a broker still starting); Metadata's addresses win
                # for the ones both know, as clients connect to the advertised listener.
                addresses = {**registered, **{b["node_id"]: (b["host"], b["port"]) for b in reply["brokers"]}}
                for t in reply["topics"]:
                    if t["error_code"] == 0:
                        listed.update({(t["name"], p["partition_index"]): list(p["replica_nodes"])
                                       for p in t["partitions"]})
        except ClientError as e:
            if not registered:
                raise
            addresses = registered
            error = f"Metadata from none of the registered brokers: {e}"
            return ClusterView(source, _brokers(source, addresses, capacity), [], error)
    except (ClientError, FleetError) as e:
        return ClusterView(source, [], [], str(e))
    # ZooKeeper's assignment is what Metadata serves in a ZooKeeper-mode Kafka cluster (the controller's source),
    # and the only whole view of a moverd fleet, whose brokers each describe only themselves in Metadata.
    partitions = sorted((t, p, r) for (t, p), r in {**listed, **assigned}.items())
    missing = sorted({b for _, _, replicas in partitions for b in replicas} - set(addresses))
    return ClusterView(source, _brokers(source, addresses, capacity), partitions, missing=missing)


def _brokers(source: ClusterSource, addresses: dict[int, tuple[str, int]], capacity: Capacity) -> list[BrokerEndpoint]:
    return [BrokerEndpoint(source.name, node, host, port, capacity.for_broker(node), source.security)
            for node, (host, port) in sorted(addresses.items())]


def zookeeper_cluster(connect: str, timeout: float = ZK_TIMEOUT_S, protocol: str = PLAINTEXT
                      ) -> tuple[dict[int, tuple[str, int]], dict[tuple[str, int], list[int]]]:
    """From one ZooKeeper-mode cluster's znodes (docs/audit.md), through the tools' one reader
    (mover/admin/zookeeper.py, strict): node id -> (host, port) from `/brokers/ids/<id>`, the endpoint of the
    security protocol the client speaks; and every partition's replicas, in assignment order, from
    `/brokers/topics/<topic>`."""
    from mover.admin.zookeeper import AdminZkClient

    try:
        with AdminZkClient(connect, timeout=timeout, connect_timeout=timeout, read_only=True) as zk:
            return zk.brokers(protocol, strict=True), zk.assignment(None, strict=True)
    except AdminError as e:
        raise FleetError(str(e)) from None
