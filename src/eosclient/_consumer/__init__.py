"""The consumer's internals: assignors, group membership, partition state, fetching, the I/O loop.

Private to :mod:`eosclient.consumer` and :mod:`eosclient.aio.consumer`, the two fronts over
``session`` (:class:`~eosclient._consumer.session.ConsumerSession`: one consumer's state, its
poll, positions and rebalance steps) and ``commit`` (the commit path). The sans-IO pieces
(``assignors``, ``protocol``, ``membership``, ``partitions``, ``offsets``) take responses and
time in and give requests and records out; ``fetcher``, ``group`` and ``loop`` drive them
through :mod:`eosclient._net`.
"""
