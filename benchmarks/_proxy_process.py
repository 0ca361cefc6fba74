"""Run `KafkaProxy` until stdin closes: `python _proxy_process.py HOST PORT LATENCY`.

Started by `_harness.ProxyProcess`; prints the port it listens on, then serves until its parent
closes stdin (or dies, which closes it too).
"""

from __future__ import annotations

import sys

from eosclient.testing.proxy import KafkaProxy


def main(argv: list[str]) -> None:
    """Serve as a proxy in front of ``argv[0]:argv[1]`` adding ``argv[2]`` seconds each way."""
    host, port, latency = argv[0], int(argv[1]), float(argv[2])
    with KafkaProxy(host, port, latency=latency) as proxy:
        print(proxy.port, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main(sys.argv[1:])
