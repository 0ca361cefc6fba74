"""The consumer's internals: assignors, group membership, partition state, fetching, the I/O loop.

Private to :mod:`eosclient.consumer` and :mod:`eosclient.group`. The sans-IO pieces
(``assignors``, ``protocol``, ``membership``, ``partitions``) take responses and time in and give
requests and records out; ``fetcher``, ``offsets`` and ``loop`` drive them through
:mod:`eosclient._net`.
"""
