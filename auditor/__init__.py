"""Auditor: how good are the human labels, and does a model release beat the humans?"""

__version__ = "0.1.0"
