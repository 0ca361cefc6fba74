"""The ``eosclient`` command's subcommands beyond ``cli.py``'s, one module per command group.

* ``common.py``: what every command shares: connection options, ``KEY=VALUE`` settings, exit
  codes, one-line errors, output formats;
* ``topics.py``: ``eosclient topics {create,list,describe,delete}``;
* ``produce.py``: ``eosclient produce`` (lines or files, in transactions);
* ``consume.py``: ``eosclient consume`` (read_committed by default);
* ``groups.py``: ``eosclient groups {list,describe}`` (lag against the LSO);
* ``txn.py``: ``eosclient txn {list,describe,hanging,abort}`` (KIP-664).

``eosclient.cli`` builds the parser from them and runs the chosen handler.
"""
