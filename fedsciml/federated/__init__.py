"""Federated layer: client messages, aggregators and the round simulation."""
