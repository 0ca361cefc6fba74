"""The sans-IO core: protocol rules as pure state machines, with no sockets, threads or clocks.

Time is passed in (``now``, in seconds); requests come out as values and responses go in as
values, so every rule is testable in microseconds without a broker.
"""
