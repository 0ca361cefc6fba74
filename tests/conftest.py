"""Shared pytest configuration: the eosclient broker fixtures."""

pytest_plugins = ["eosclient.testing.pytest_plugin"]
