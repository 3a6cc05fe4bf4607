"""The batching axis: which waiting requests go next (BatchingPolicy) and how a chosen set is
cut into micro-batches (PartitionPolicy)."""

from __future__ import annotations

from typing import Any

from oasr.registry import Registry


class BatchingPolicy:
    """Orders the waiting queue; ``select`` returns the requests to run next."""

    def select(self, waiting: list[Any], max_batch: int) -> list[Any]:
        raise NotImplementedError


class PartitionPolicy:
    """Cuts a selected set of requests into micro-batches for one forward each."""

    def partition(self, requests: list[Any]) -> list[list[Any]]:
        raise NotImplementedError


BATCHING_POLICIES: Registry[type[BatchingPolicy]] = Registry(
    "batching policy", entry_point_group="oasr.batching_policies"
)
PARTITION_POLICIES: Registry[type[PartitionPolicy]] = Registry(
    "partition policy", entry_point_group="oasr.partition_policies"
)

for _name, _cls in (("fcfs", "FcfsPolicy"), ("sjf", "SjfPolicy"), ("bucket", "BucketPolicy")):
    BATCHING_POLICIES.register(_name, f"oasr.engine.policies:{_cls}")
# No packed (unpadded, varlen) forward exists, so no partition packs: each micro-batch is
# one padded forward.
for _name, _cls in (("count", "CountPartition"), ("frames", "FramesPartition")):
    PARTITION_POLICIES.register(_name, f"oasr.engine.policies:{_cls}")


def register_batching_policy(name: str):
    return BATCHING_POLICIES.register(name)


def register_partition_policy(name: str):
    return PARTITION_POLICIES.register(name)


def build_batching_policy(name: str, **kwargs: Any) -> BatchingPolicy:
    return BATCHING_POLICIES.get(name)(**kwargs)


def build_partition_policy(name: str, **kwargs: Any) -> PartitionPolicy:
    return PARTITION_POLICIES.get(name)(**kwargs)
