"""Helpers for testing code that uses eosclient: real brokers on loopback ports, a pytest plugin."""
