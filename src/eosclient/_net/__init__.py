"""Network I/O: sockets and deadlines around the sans-IO protocol layer."""
