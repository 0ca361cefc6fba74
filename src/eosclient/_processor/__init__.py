"""Internals of :mod:`eosclient.processor` (and of the checker): not public."""
