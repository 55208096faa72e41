"""Optimizers: the Levenberg–Marquardt state machine and centralized drivers."""
