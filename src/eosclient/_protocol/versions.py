"""ApiVersions negotiation: for each API, the highest version both this client and a broker speak.

Each connection negotiates on its own (brokers of one cluster may run different releases during an
upgrade), so a `VersionTable` belongs to one broker connection. Overrides let a caller cap an API
lower than the client's default for one broker, for a broker that advertises a version it cannot
serve.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from eosclient._protocol.apis import APIS
from eosclient.errors import ApiKey, UnsupportedVersionError


@dataclass(frozen=True, slots=True)
class VersionTable:
    """The versions one broker connection uses, after negotiation.

    Attributes:
        broker: the broker's advertised range per API key, as received.
        chosen: the version this client sends per API key, for each API both sides speak.
    """

    broker: Mapping[int, tuple[int, int]]
    chosen: Mapping[ApiKey, int] = field(default_factory=dict)

    def version(self, key: ApiKey) -> int:
        """Return the version to send for `key`.

        Raises:
            UnsupportedVersionError: the broker and this client share no version of the API.
        """
        try:
            return self.chosen[key]
        except KeyError:
            raise UnsupportedVersionError(_explain(key, self.broker.get(int(key)))) from None

    def supports(self, key: ApiKey, min_version: int = 0) -> bool:
        """Whether `key` can be used at `min_version` or newer (for optional features)."""
        chosen = self.chosen.get(key)
        return chosen is not None and chosen >= min_version


def negotiate(
    broker: Iterable[tuple[int, int, int]], caps: Mapping[ApiKey, int] | None = None
) -> VersionTable:
    """Meet the broker's advertised ranges with the client's.

    Args:
        broker: (api_key, min_version, max_version) triples from an ApiVersions response.
        caps: optional lower ceilings per API for this broker.

    Returns:
        The table; APIs with no common version are absent from `chosen` and raise on use.
    """
    ranges = {key: (low, high) for key, low, high in broker}
    chosen: dict[ApiKey, int] = {}
    for key, api in APIS.items():
        if key not in ranges:
            continue
        low, high = ranges[key]
        top = min(api.max_version, high, (caps or {}).get(key, api.max_version))
        if top >= max(api.min_version, low):
            chosen[key] = top
    return VersionTable(broker=ranges, chosen=chosen)


def _explain(key: ApiKey, broker: tuple[int, int] | None) -> str:
    api = APIS.get(key)
    ours = f"v{api.min_version}-v{api.max_version}" if api else "none"
    theirs = f"v{broker[0]}-v{broker[1]}" if broker else "none (not advertised)"
    return f"{key.name}: no common version (client speaks {ours}, broker {theirs})"
