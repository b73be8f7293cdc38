"""Generators of the lab notebooks: one module per lab (``labNN.py`` with ``LAB`` and ``cells()``)."""
