"""The federated runtime: requests and replies, strategies, clients, transports, the one round loop, checkpoints,
results, and the driver that turns (problem, method, options) into a :class:`~fedsciml.runtime.results.Result`."""
