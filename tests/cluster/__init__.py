"""Many nodes on one machine: simulated nodes, network namespaces."""
