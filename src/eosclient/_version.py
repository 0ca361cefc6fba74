"""The package's version, in one place: the root package re-exports it, the wire layer sends it
in ApiVersions (KIP-511's client software version), and the build reads it from here.

A leaf: it imports nothing, so a low layer can read the version without importing the package
root (which imports every facade).
"""

__version__ = "0.1.0.dev0"
