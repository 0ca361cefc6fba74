"""Run `KafkaProxy` until stdin closes: `python _proxy_process.py HOST PORT LATENCY [CERT KEY]`.

Started by `_harness.ProxyProcess`; prints the port it listens on, then serves until its parent
closes stdin (or dies, which closes it too). With CERT and KEY (PEM files) it is a TLS front:
clients speak TLS 1.2+ to it, it speaks plaintext to the broker.
"""

from __future__ import annotations

import ssl
import sys

from eosclient.testing.proxy import KafkaProxy


def main(argv: list[str]) -> None:
    """Serve as a proxy in front of ``argv[0]:argv[1]`` adding ``argv[2]`` seconds each way."""
    host, port, latency = argv[0], int(argv[1]), float(argv[2])
    context = None
    if len(argv) > 3:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(argv[3], argv[4])
    with KafkaProxy(host, port, latency=latency, ssl_context=context) as proxy:
        print(proxy.port, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main(sys.argv[1:])
