"""The transfer layer: buffers, peers, one module per wire, the sweep driver and its statistics.

Layers point one way: ``gdrlab.commands``, ``gdrlab.labsupport`` and ``gdrlab.engine`` (the public
facade) import from here; nothing here imports from them. Importing this package loads neither
CUDA nor libibverbs.
"""
