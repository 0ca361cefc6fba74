"""The producer facade's private parts: argument checks, routing, the sender loop, results."""
