"""The wire adapter: Kafka framing, correlation and version negotiation, without I/O.

kafka-python's generated request/response classes do the encoding; this package adds what a
client needs around them: splitting a byte stream into frames, matching responses to requests,
and choosing for each API the highest version both sides speak.
"""
