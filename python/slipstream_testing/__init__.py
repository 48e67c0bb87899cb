"""Helpers to run real Slipstream nodes from Python tests and demos."""

from .node import Node, free_port, binary_path
from .replset import ReplicaSet, ClusterError

__all__ = ["Node", "free_port", "binary_path", "ReplicaSet", "ClusterError"]
