"""Kafka's ACL model (KIP-140, KIP-290): resource patterns, entries, filters, and their wire and ZooKeeper forms.

The numbers are the protocol's (AclOperation, AclPermissionType, ResourceType, PatternType in Kafka's clients);
the names are those Kafka's ZooKeeper JSON uses (`"operation":"Read"`, `"permissionType":"Allow"`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# Types and operations that may appear in a stored ACL (the rest are filter-only or unknown).
CONCRETE_TYPES = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID,
                  ResourceType.DELEGATION_TOKEN, ResourceType.USER)
CONCRETE_OPERATIONS = tuple(o for o in Operation if o not in (Operation.UNKNOWN, Operation.ANY))

# Kafka: an ALLOW of Read, Write, Delete or Alter implies Describe; of AlterConfigs implies DescribeConfigs.
IMPLIED_BY = {
    Operation.DESCRIBE: (Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER),
    Operation.DESCRIBE_CONFIGS: (Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS),
}

# ZooKeeper names (Kafka's ResourceType.toString in camel case, and its JSON operation names).
ZK_TYPE_NAMES = {
    ResourceType.TOPIC: "Topic",
    ResourceType.GROUP: "Group",
    ResourceType.CLUSTER: "Cluster",
    ResourceType.TRANSACTIONAL_ID: "TransactionalId",
    ResourceType.DELEGATION_TOKEN: "DelegationToken",
    ResourceType.USER: "User",
}
ZK_OPERATION_NAMES = {
    Operation.ALL: "All",
    Operation.READ: "Read",
    Operation.WRITE: "Write",
    Operation.CREATE: "Create",
    Operation.DELETE: "Delete",
    Operation.ALTER: "Alter",
    Operation.DESCRIBE: "Describe",
    Operation.CLUSTER_ACTION: "ClusterAction",
    Operation.DESCRIBE_CONFIGS: "DescribeConfigs",
    Operation.ALTER_CONFIGS: "AlterConfigs",
    Operation.IDEMPOTENT_WRITE: "IdempotentWrite",
    Operation.CREATE_TOKENS: "CreateTokens",
    Operation.DESCRIBE_TOKENS: "DescribeTokens",
}
ZK_PERMISSION_NAMES = {Permission.ALLOW: "Allow", Permission.DENY: "Deny"}


@dataclass(frozen=True, order=True)
class Resource:
    type: ResourceType
    name: str
    pattern: PatternType = PatternType.LITERAL

    def __str__(self) -> str:
        return f"{self.type.name}:{self.pattern.name}:{self.name}"

    def matches(self, resource_type: ResourceType, name: str) -> bool:
        """Does this stored pattern apply to the concrete resource `name` of `resource_type`?"""
        if self.type != resource_type:
            return False
        if self.pattern == PatternType.LITERAL:
            return self.name == name or self.name == WILDCARD
        if self.pattern == PatternType.PREFIXED:
            return name.startswith(self.name)
        return False


@dataclass(frozen=True, order=True)
class AclEntry:
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def applies(self, principal: str, host: str, operation: Operation) -> bool:
        if self.principal not in (principal, WILDCARD_PRINCIPAL):
            return False
        if self.host not in (host, WILDCARD):
            return False
        return self.operation in (operation, Operation.ALL)

    def to_zk(self) -> dict[str, str]:
        return {
            "principal": self.principal,
            "permissionType": ZK_PERMISSION_NAMES[self.permission],
            "operation": ZK_OPERATION_NAMES[self.operation],
            "host": self.host,
        }

    @classmethod
    def from_zk(cls, value: dict[str, str]) -> AclEntry:
        op = {v: k for k, v in ZK_OPERATION_NAMES.items()}[value["operation"]]
        perm = {v: k for k, v in ZK_PERMISSION_NAMES.items()}[value["permissionType"]]
        return cls(value["principal"], value["host"], op, perm)


@dataclass(frozen=True)
class AclFilter:
    """DescribeAcls / DeleteAcls filter: ANY and None match everything; MATCH matches what would apply to a name."""

    resource_type: ResourceType
    resource_name: str | None
    pattern: PatternType
    principal: str | None
    host: str | None
    operation: Operation
    permission: Permission

    def matches_resource(self, r: Resource) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != r.type:
            return False
        if self.pattern == PatternType.MATCH:
            if self.resource_name is None:
                return True
            if r.pattern == PatternType.LITERAL:
                return r.name in (self.resource_name, WILDCARD)
            return r.pattern == PatternType.PREFIXED and self.resource_name.startswith(r.name)
        if self.pattern != PatternType.ANY and self.pattern != r.pattern:
            return False
        return self.resource_name is None or self.resource_name == r.name

    def matches_entry(self, e: AclEntry) -> bool:
        return (
            (self.principal is None or self.principal == e.principal)
            and (self.host is None or self.host == e.host)
            and (self.operation == Operation.ANY or self.operation == e.operation)
            and (self.permission == Permission.ANY or self.permission == e.permission)
        )


def validate_binding(resource: Resource, entry: AclEntry) -> str | None:
    """Why Kafka would refuse to store this ACL (INVALID_REQUEST), or None."""
    if resource.type not in CONCRETE_TYPES:
        return f"resource type {resource.type.name} cannot be used in an ACL"
    if resource.pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"pattern type {resource.pattern.name} cannot be used in an ACL"
    if entry.operation not in CONCRETE_OPERATIONS:
        return f"operation {entry.operation.name} cannot be used in an ACL"
    if entry.permission not in (Permission.ALLOW, Permission.DENY):
        return f"permission type {entry.permission.name} cannot be used in an ACL"
    if not resource.name:
        return "resource name must not be empty"
    if resource.type == ResourceType.CLUSTER and resource.name != CLUSTER_NAME:
        return f"the cluster resource is named {CLUSTER_NAME}"
    if ":" not in entry.principal:
        return f"principal {entry.principal!r} is not TYPE:NAME"
    return None
