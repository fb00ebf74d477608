"""Fixtures of the Python suite: real ps-server processes on 127.0.0.1."""

import os

import pytest

import hetps
from hetps.cluster import LocalCluster

TRANSPORTS = [t.strip() for t in hetps.available_transports().split(",")]


@pytest.fixture
def cluster_factory():
    """Starts clusters for a test and stops them after it: factory(shards, workers, **kw)."""
    clusters = []

    def start(shards=1, workers=1, **kwargs):
        cluster = LocalCluster(shards=shards, workers=workers, lifetime_s=300, **kwargs)
        clusters.append(cluster)
        cluster.start()
        return cluster

    yield start
    for cluster in clusters:
        cluster.close()


def client_for(cluster, rank=0, **overrides):
    options = hetps.ClientOptions(servers=cluster.servers, rank=rank,
                                  world_size=cluster.num_workers, call_timeout=30.0,
                                  connect_timeout=10.0)
    for name, value in overrides.items():
        setattr(options, name, value)
    return hetps.Client(options)
