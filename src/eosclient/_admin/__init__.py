"""The admin client's insides; the public face is :class:`eosclient.Admin` (``admin.py``).

Where each part lives:

* ``runner.py``: the I/O thread (the producer's and consumer's
  :class:`~eosclient._net.io_thread.IoThread`) and blocking calls on it, each with a deadline;
* ``wire.py``: the admin requests and readers of their answers, as kafka-python objects;
* ``hanging.py``: which transactions are hanging (KIP-664), from answers already read. Sans-IO.
"""
