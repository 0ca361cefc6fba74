"""Run `KafkaProxy` until stdin closes:
`python _proxy_process.py [--precise] HOST PORT LATENCY [CERT KEY]`.

Started by `_harness.ProxyProcess`; prints the port it listens on, then serves until its parent
closes stdin (or dies, which closes it too). With CERT and KEY (PEM files) it is a TLS front:
clients speak TLS 1.2+ to it, it speaks plaintext to the broker. With ``--precise`` it holds
frames to within ~0.1 ms of the latency (`KafkaProxy`'s ``precise``).

While it serves, each line ``timings`` on stdin is answered with one JSON line on stdout: the
`Timing` of every request since the last such line (as lists, see `FIELDS`), which are then
forgotten. The benchmark reads them to say where a transaction's round trips went.
"""

from __future__ import annotations

import json
import ssl
import sys

from eosclient.testing.proxy import KafkaProxy

FIELDS = ("api_key", "api_version", "connection", "arrived", "forwarded", "answered", "delivered")


def main(argv: list[str]) -> None:
    """Serve as a proxy in front of ``argv[0]:argv[1]`` adding ``argv[2]`` seconds each way."""
    precise = "--precise" in argv
    argv = [arg for arg in argv if arg != "--precise"]
    host, port, latency = argv[0], int(argv[1]), float(argv[2])
    context = None
    if len(argv) > 3:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(argv[3], argv[4])
    with KafkaProxy(host, port, latency=latency, ssl_context=context, precise=precise) as proxy:
        print(proxy.port, flush=True)
        for line in sys.stdin:
            if line.strip() != "timings":
                print(json.dumps({"error": f"unknown command {line.strip()!r}"}), flush=True)
                continue
            rows = [[getattr(t, name) for name in FIELDS] for t in proxy.take_timings()]
            print(json.dumps({"timings": rows}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
